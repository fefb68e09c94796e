-- One job, as the API shows it: with every failed attempt's error, when a cancel was asked
-- for, the jobs it waits for and its handler's result (lists leave them out).
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, priority, total, progress, created_at, finished_at, errors,
       cancel_requested_at, parents, run_anyway, result
FROM jobs
WHERE id = :job_id
