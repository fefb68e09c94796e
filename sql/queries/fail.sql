-- A failed attempt of a job run :run_id still holds. With attempts left: back to pending
-- after 2^attempts minutes (2, 4, 8, ... capped at a day). Otherwise: failed.
-- :job_id id, :run_id run id, :error error text, :max_attempts the stage's max attempts.
UPDATE jobs
SET status      = CASE WHEN attempts >= :max_attempts THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN attempts >= :max_attempts THEN now() END,
    run_after   = CASE WHEN attempts >= :max_attempts THEN run_after
                       ELSE now() + make_interval(mins => least(power(2, attempts), 1440)::int) END,
    locked_at   = NULL,
    last_error  = :error,
    errors      = job_errors_with(errors, attempts, :error, :run_id)
WHERE id = :job_id AND run_id = :run_id AND status = 'running'
RETURNING id, type, payload, attempts, lane, run_id, batch_id, dedupe_key, created_at, status, run_after
