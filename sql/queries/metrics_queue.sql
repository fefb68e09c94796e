-- The queue now, per job type, for /metrics and `skiplock status`: pending jobs (from
-- the job_lanes counters, never a count of jobs), those of them in paused lanes, running
-- jobs (the partial index on running jobs: a handful), and how long the oldest ready job
-- has been due. A lane's ready_at is the run_after of a pending job already due (the
-- lane's earliest when it was written); it stops moving when nothing claims the lane, so
-- the age grows exactly while ready work waits.
--
-- A lane's count is its row plus what the lane journal holds for it (claims that found the
-- row held by another claim; a few lines while runs overlap), so the figure is exact
-- before the lines are folded in too.
WITH journal AS (
    SELECT type, lane, sum(pending)::bigint AS pending FROM job_lane_journal GROUP BY type, lane
), counted AS (
    SELECT l.type, l.paused, l.ready_at, l.pending + coalesce(j.pending, 0) AS pending
    FROM job_lanes l
    LEFT JOIN journal j ON j.type = l.type AND j.lane = l.lane
    WHERE l.pending > 0
), lanes AS (
    SELECT type,
           sum(pending)::bigint AS pending,
           (sum(pending) FILTER (WHERE paused))::bigint AS paused,
           extract(epoch FROM now() - min(ready_at) FILTER (WHERE NOT paused AND ready_at <= now()))
               AS oldest_ready_seconds
    FROM counted
    WHERE pending > 0
    GROUP BY type
), running AS (
    SELECT type, count(*) AS running FROM jobs WHERE status = 'running' GROUP BY type
)
SELECT type, coalesce(l.pending, 0) AS pending, coalesce(l.paused, 0) AS paused,
       coalesce(r.running, 0) AS running, l.oldest_ready_seconds::float8 AS oldest_ready_seconds
FROM lanes l FULL JOIN running r USING (type)
ORDER BY type
