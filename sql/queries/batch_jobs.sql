SELECT id, type, status, attempts, priority, total, progress, last_error, run_after, created_at, finished_at
FROM jobs WHERE batch_id = :batch_id ORDER BY created_at, id
