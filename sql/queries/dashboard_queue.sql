-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done and failed of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Open jobs come off the partial indexes,
-- finished ones off jobs_finished_idx: never a scan of the whole history. Row-level
-- security keeps a tenant to its own jobs.
WITH j AS (
    SELECT type, status, run_after FROM jobs WHERE status IN ('pending', 'running')
    UNION ALL
    SELECT type, status, NULL FROM jobs
    WHERE status IN ('done', 'failed') AND finished_at > now() - interval '1 day'
)
SELECT type,
       count(*) FILTER (WHERE status = 'pending' AND run_after <= now())::int AS ready,
       count(*) FILTER (WHERE status = 'pending' AND run_after > now())::int  AS waiting,
       count(*) FILTER (WHERE status = 'running')::int                       AS running,
       count(*) FILTER (WHERE status = 'done')::int                          AS done,
       count(*) FILTER (WHERE status = 'failed')::int                        AS failed,
       extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now()))::float8
           AS oldest_ready_seconds
FROM j
GROUP BY type
ORDER BY type
