-- Retry job :job_id if, and only if, it failed or was cancelled: back to pending, due now, with a fresh set of
-- attempts. last_error stays as the record of why it had failed. A retry whose dedupe
-- key is held by another open job raises a unique violation (the caller says so).
UPDATE jobs
SET status = 'pending', attempts = 0, run_after = now(), locked_at = NULL, finished_at = NULL,
    cancel_requested_at = NULL  -- the old request is spent
WHERE id = :job_id AND status IN ('failed', 'cancelled')
RETURNING id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
          run_id, batch_id, lane, total, progress, created_at, finished_at
