-- Finished runs of the last day, oldest first (at most :limit): the dashboard's chart of
-- jobs done, failed and deferred per run. runs_started_idx finds them.
SELECT id, started_at, jobs_done, jobs_failed, jobs_retried, jobs_deferred, stop_reason
FROM runs
WHERE started_at > now() - interval '1 day' AND finished_at IS NOT NULL
ORDER BY started_at DESC
LIMIT :limit
