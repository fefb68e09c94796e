-- The queue now, per job type, for /metrics and `skiplock status`: pending jobs (from
-- the job_lanes counters, never a count of jobs), those of them in paused lanes, running
-- jobs (the partial index on running jobs: a handful), and how long the oldest ready job
-- has been due. A lane's ready_at is the run_after of a pending job already due (the
-- lane's earliest when it was written); it stops moving when nothing claims the lane, so
-- the age grows exactly while ready work waits.
--
-- From job_lane_counts: a lane's row plus what the lane journal holds for it, so the
-- figure is exact while runs overlap too.
WITH lanes AS (
    SELECT type,
           sum(pending)::bigint AS pending,
           (sum(pending) FILTER (WHERE paused))::bigint AS paused,
           extract(epoch FROM now() - min(ready_at) FILTER (WHERE NOT paused AND ready_at <= now()))
               AS oldest_ready_seconds
    FROM job_lane_counts
    WHERE pending > 0
    GROUP BY type
), running AS (
    SELECT type, count(*) AS running FROM jobs WHERE status = 'running' GROUP BY type
)
SELECT type, coalesce(l.pending, 0) AS pending, coalesce(l.paused, 0) AS paused,
       coalesce(r.running, 0) AS running, l.oldest_ready_seconds::float8 AS oldest_ready_seconds
FROM lanes l FULL JOIN running r USING (type)
ORDER BY type
