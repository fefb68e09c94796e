-- Fail one stuck job. The WHERE repeats the stuck test, so of two sweeps racing
-- for the same job exactly one gets the row back (and runs the gave_up hook).
UPDATE jobs
SET status = 'failed', finished_at = now(), locked_at = NULL,
    last_error = concat_ws(E'\n', last_error, 'lease expired on the last attempt (the process holding it died or hung)'),
    errors = job_errors_with(errors, attempts, 'lease expired on the last attempt (the process holding it died or hung)',
                             run_id)
WHERE id = :job_id AND type = :type AND status = 'running'
  AND locked_at < now() - make_interval(secs => :lease_seconds)
  AND attempts >= :max_attempts
RETURNING id, type, payload, attempts, lane, run_id, batch_id, dedupe_key, created_at
