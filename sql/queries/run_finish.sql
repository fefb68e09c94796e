UPDATE runs
SET stop_reason = :stop_reason, jobs_done = :done, jobs_failed = :failed, jobs_deferred = :deferred, jobs_retried = :retried,
    quota_units = :units, summary = :summary::jsonb, error = :error, finished_at = now()
WHERE id = :run_id
RETURNING id, trigger, stop_reason, jobs_done, jobs_failed, jobs_retried, jobs_deferred, quota_units,
          summary, error, started_at, finished_at
