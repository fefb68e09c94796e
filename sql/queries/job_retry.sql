-- Retry job :job_id if, and only if, it failed or was cancelled: back to pending, due now, with a fresh set of
-- attempts. last_error stays as the record of why it had failed. A retry whose dedupe
-- key is held by another open job raises a unique violation (the caller says so). An ended
-- job holding the key whose window is over lets it go first: the subquery runs once, before
-- any row is updated (jobs_let_go_of_keys, migration 0053).
UPDATE jobs
SET status = 'pending', attempts = 0, run_after = now(), locked_at = NULL, finished_at = NULL,
    cancel_requested_at = NULL  -- the old request is spent
WHERE id = :job_id AND status IN ('failed', 'cancelled')
  AND (SELECT jobs_let_go_of_keys(ARRAY[:job_id]::uuid[])) >= 0
RETURNING id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
          run_id, batch_id, lane, priority, total, progress, created_at, finished_at
