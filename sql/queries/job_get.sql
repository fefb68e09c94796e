-- One job, as the API shows it.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE id = $1
