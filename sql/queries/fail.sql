-- A failed attempt of a job run $2 still holds. With attempts left: back to pending
-- after 2^attempts minutes (2, 4, 8, ... capped at a day). Otherwise: failed.
-- $1 id, $2 run id, $3 error text, $4 the stage's max attempts.
UPDATE jobs
SET status      = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN attempts >= $4 THEN now() END,
    run_after   = CASE WHEN attempts >= $4 THEN run_after
                       ELSE now() + make_interval(mins => least(power(2, attempts), 1440)::int) END,
    locked_at   = NULL,
    last_error  = $3,
    errors      = job_errors_with(errors, attempts, $3, $2)
WHERE id = $1 AND run_id = $2 AND status = 'running'
RETURNING id, type, payload, attempts, lane, run_id, batch_id, dedupe_key, created_at, status, run_after
