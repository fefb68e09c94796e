-- A live run says so, with what it has done so far: if it dies now, the row closed for it
-- by a later run (close_abandoned_runs) still tells the truth about its work.
UPDATE runs
SET heartbeat_at = now(), jobs_done = :done, jobs_failed = :failed, jobs_deferred = :deferred, jobs_retried = :retried,
    quota_units = :units, summary = :summary::jsonb
WHERE id = :run_id AND finished_at IS NULL
