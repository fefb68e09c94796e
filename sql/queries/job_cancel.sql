-- Cancel job :job_id if, and only if, it has not started: pending becomes failed with the
-- error 'cancelled'. A running job is never touched (its holder still owns it): the
-- guard makes this a no-op, and a claim that locked the row first wins.
UPDATE jobs
SET status = 'failed', last_error = 'cancelled', finished_at = now(), locked_at = NULL
WHERE id = :job_id AND status = 'pending'
RETURNING id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
          run_id, batch_id, lane, total, progress, created_at, finished_at
