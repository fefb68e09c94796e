-- Put jobs run :run_id still holds back to pending until their wake-up time, handing back
-- the attempt the claim counted: nothing was tried, nothing is burned. The status through
-- an expression, so the ids are found by primary key (see claim.sql).
UPDATE jobs j
SET status = 'pending', locked_at = NULL, run_after = d.until, attempts = greatest(j.attempts - 1, 0)
FROM unnest(:ids::uuid[], :until::timestamptz[]) AS d(id, until)
WHERE j.id = d.id AND j.run_id = :run_id AND (j.status || '') = 'running'
RETURNING j.id
