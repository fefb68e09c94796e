-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done, failed and cancelled of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Row-level security keeps a tenant to its own jobs.
--
-- Where the rows come from depends on :own_lanes, whether the caller reads its own lanes (a
-- tenant) or all of them (an admin); the other branch is switched off before it runs.
-- All: open jobs off the partial indexes, finished ones off jobs_finished_idx, never a
-- scan of the whole history. Own lanes: lane by lane from the caller's lanes (row-level
-- security on lanes picks them), open jobs off jobs_open_dedupe_uq and finished ones off
-- jobs_lane_list_idx, so a tenant's dashboard never reads another tenant's jobs. The
-- lane is named by a one-value range, not an equality: the planner takes an equality with
-- an unknown lane to match 1/(lanes) of the table, which on a table with few lanes made
-- a scan of every finished job look cheaper than the lane's index (300,000 read for 13).
WITH j AS (
    SELECT type, status, run_after FROM jobs WHERE NOT :own_lanes::boolean AND status IN ('pending', 'running')
    UNION ALL
    SELECT type, status, NULL FROM jobs
    WHERE NOT :own_lanes AND status IN ('done', 'failed', 'cancelled') AND finished_at > now() - interval '1 day'
    UNION ALL
    SELECT o.type, o.status, o.run_after
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, status, run_after FROM jobs
        WHERE lane >= l.id AND lane <= l.id AND status IN ('pending', 'running')
        OFFSET 0  -- lane by lane: not flattened into a join against every open job
    ) o
    WHERE :own_lanes
    UNION ALL
    SELECT f.type, f.status, NULL
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, status FROM jobs
        WHERE lane >= l.id AND lane <= l.id
          AND lane <> '00000000-0000-0000-0000-000000000000'
          AND status IN ('done', 'failed', 'cancelled') AND finished_at > now() - interval '1 day'
        OFFSET 0
    ) f
    WHERE :own_lanes
)
SELECT type,
       count(*) FILTER (WHERE status = 'pending' AND run_after <= now())::int AS ready,
       count(*) FILTER (WHERE status = 'pending' AND run_after > now())::int  AS waiting,
       count(*) FILTER (WHERE status = 'running')::int                       AS running,
       count(*) FILTER (WHERE status = 'done')::int                          AS done,
       count(*) FILTER (WHERE status = 'failed')::int                        AS failed,
       count(*) FILTER (WHERE status = 'cancelled')::int                     AS cancelled,
       extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now()))::float8
           AS oldest_ready_seconds
FROM j
GROUP BY type
ORDER BY type
