-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done, failed and cancelled of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Row-level security keeps a tenant to its own jobs.
--
-- The last day is the half hours that overlap it (from the start of the one 24 hours
-- ago: 24 to 24.5 hours), summed from the endings' counters (migration 0052), never the
-- jobs that ended: job_endings_by_type for an admin (every lane), job_endings lane by lane
-- from the caller's own lanes for a tenant (row-level security on lanes picks them).
--
-- Open jobs, where :own_lanes (a tenant) or not (an admin) chooses the branch; the other
-- is switched off before it runs. All: off the partial indexes of open jobs. Own lanes:
-- lane by lane, off jobs_open_dedupe_uq, so a tenant's dashboard never reads another
-- tenant's jobs. The lane is named by a one-value range, not an equality: the planner
-- takes an equality with an unknown lane to match 1/(lanes) of the table, which on a
-- table with few lanes made a scan of every finished job look cheaper than the lane's
-- index (300,000 read for 13).
WITH open_jobs AS (
    SELECT type, status, run_after FROM jobs WHERE NOT :own_lanes::boolean AND status IN ('pending', 'running')
    UNION ALL
    SELECT o.type, o.status, o.run_after
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, status, run_after FROM jobs
        WHERE lane >= l.id AND lane <= l.id AND status IN ('pending', 'running')
        OFFSET 0  -- lane by lane: not flattened into a join against every open job
    ) o
    WHERE :own_lanes
)
, ended AS (
    SELECT type, done, failed, cancelled FROM job_endings_by_type
    WHERE NOT :own_lanes AND bucket >= date_bin('30 minutes', now() - interval '1 day', 'epoch')
    UNION ALL
    SELECT e.type, e.done, e.failed, e.cancelled
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, done, failed, cancelled FROM job_endings
        WHERE lane >= l.id AND lane <= l.id
          AND bucket >= date_bin('30 minutes', now() - interval '1 day', 'epoch')
        OFFSET 0
    ) e
    WHERE :own_lanes
)
SELECT type, coalesce(o.ready, 0) AS ready, coalesce(o.waiting, 0) AS waiting, coalesce(o.running, 0) AS running,
       coalesce(f.done, 0) AS done, coalesce(f.failed, 0) AS failed, coalesce(f.cancelled, 0) AS cancelled,
       o.oldest_ready_seconds
FROM (
    SELECT type,
           count(*) FILTER (WHERE status = 'pending' AND run_after <= now())::int AS ready,
           count(*) FILTER (WHERE status = 'pending' AND run_after > now())::int  AS waiting,
           count(*) FILTER (WHERE status = 'running')::int                       AS running,
           extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now()))::float8
               AS oldest_ready_seconds
    FROM open_jobs
    GROUP BY type
) o
FULL JOIN (
    SELECT type, sum(done)::int AS done, sum(failed)::int AS failed, sum(cancelled)::int AS cancelled
    FROM ended
    GROUP BY type
    HAVING sum(done) <> 0 OR sum(failed) <> 0 OR sum(cancelled) <> 0
) f USING (type)
ORDER BY type
