UPDATE runs
SET stop_reason = $2, jobs_done = $3, jobs_failed = $4, jobs_deferred = $5, jobs_retried = $9,
    quota_units = $6, summary = $7::jsonb, error = $8, finished_at = now()
WHERE id = $1
RETURNING id, trigger, stop_reason, jobs_done, jobs_failed, jobs_retried, jobs_deferred, quota_units,
          summary, error, started_at, finished_at
