-- Put jobs run $3 still holds back to pending until their wake-up time, handing back
-- the attempt the claim counted: nothing was tried, nothing is burned. The status through
-- an expression, so the ids are found by primary key (see claim.sql).
UPDATE jobs j
SET status = 'pending', locked_at = NULL, run_after = d.until, attempts = greatest(j.attempts - 1, 0)
FROM unnest($1::uuid[], $2::timestamptz[]) AS d(id, until)
WHERE j.id = d.id AND j.run_id = $3 AND (j.status || '') = 'running'
RETURNING j.id
