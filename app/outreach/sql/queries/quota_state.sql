-- Today's (UTC) quota row, if anything was spent today.
SELECT day, units, reserve, spent, units - spent AS units_left
FROM quota_ledger
WHERE day = (now() AT TIME ZONE 'UTC')::date
