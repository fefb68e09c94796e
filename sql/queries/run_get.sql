-- One run, as the API shows it.
SELECT id, trigger, stop_reason, jobs_done, jobs_failed, jobs_retried, jobs_deferred, quota_units, summary,
       error, started_at, finished_at
FROM runs
WHERE id = :run_id
