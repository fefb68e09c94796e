-- Spend :units units of today's (UTC) shared quota, atomically. :daily_units: the day's units,
-- :reserve: its reserve, :person: may this run use the reserve (a person started it).
-- One statement: the first spend of a day creates the row, later ones add to it, and
-- the WHERE keeps `spent` at or under what this run may use, so the ledger never goes
-- below zero however many runs spend at once. No row back: not enough left
-- (quota_state.sql tells why). The row's limits follow the settings in force.
INSERT INTO quota_ledger AS q (day, units, reserve, spent)
SELECT (now() AT TIME ZONE 'UTC')::date, :daily_units, :reserve, :units
WHERE :units <= :daily_units - CASE WHEN :person THEN 0 ELSE :reserve END
ON CONFLICT (day) DO UPDATE
SET spent = q.spent + excluded.spent, units = excluded.units, reserve = excluded.reserve,
    updated_at = now()
WHERE q.spent + excluded.spent <= excluded.units - CASE WHEN :person THEN 0 ELSE excluded.reserve END
RETURNING q.units - q.spent AS units_left
