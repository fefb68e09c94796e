-- Spend $3 units of today's (UTC) shared quota, atomically. $1: the day's units,
-- $2: its reserve, $4: may this run use the reserve (a person started it).
-- One statement: the first spend of a day creates the row, later ones add to it, and
-- the WHERE keeps `spent` at or under what this run may use, so the ledger never goes
-- below zero however many runs spend at once. No row back: not enough left
-- (quota_state.sql tells why). The row's limits follow the settings in force.
INSERT INTO quota_ledger AS q (day, units, reserve, spent)
SELECT (now() AT TIME ZONE 'UTC')::date, $1, $2, $3
WHERE $3 <= $1 - CASE WHEN $4 THEN 0 ELSE $2 END
ON CONFLICT (day) DO UPDATE
SET spent = q.spent + excluded.spent, units = excluded.units, reserve = excluded.reserve,
    updated_at = now()
WHERE q.spent + excluded.spent <= excluded.units - CASE WHEN $4 THEN 0 ELSE excluded.reserve END
RETURNING q.units - q.spent AS units_left
