-- A live run says so, with what it has done so far: if it dies now, the row closed for it
-- by a later run (close_abandoned_runs) still tells the truth about its work.
UPDATE runs
SET heartbeat_at = now(), jobs_done = $2, jobs_failed = $3, jobs_deferred = $4, jobs_retried = $7,
    quota_units = $5, summary = $6::jsonb
WHERE id = $1 AND finished_at IS NULL
