-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done, failed and cancelled of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Row-level security keeps a tenant to its own jobs.
--
-- The last day's endings: an admin's a range of jobs_finished_idx, never the history
-- before the day (it grows with the day's endings); a tenant's lane by lane from its own
-- lanes, off jobs_lane_list_idx, so a tenant's dashboard never reads another tenant's jobs. The lane is named by a one-value range, not
-- an equality: the planner takes an equality with an unknown lane to match 1/(lanes) of
-- the table, which on a table with few lanes made a scan of every finished job look
-- cheaper than the lane's index (300,000 read for 13).
--
-- Open jobs: ready and waiting are counted up to :cap (ready_more / waiting_more: there
-- are more), per type from app_pending_types(), so a backlog of any size reads at most
-- :cap + 1 entries of each; the oldest due job is one probe. An admin's off jobs_due_idx
-- (type, run_after); a tenant's lane by lane from its own lanes (row-level security on
-- lanes picks them) off jobs_wake_idx (type, lane, run_after), so a tenant's dashboard
-- never reads another tenant's pending jobs. :own_lanes chooses the branch; the other is
-- switched off before it runs. Running jobs are as many as the runs hold: counted.
WITH own AS MATERIALIZED (  -- the caller's lanes, read once for every probe below
    SELECT id FROM lanes WHERE :own_lanes::boolean
), pending AS (
    SELECT t.type,
           (SELECT count(*) FROM (SELECT 1 FROM jobs
                                  WHERE status = 'pending' AND type = t.type AND run_after <= now()
                                  LIMIT :cap::int + 1) r)::int AS ready,
           (SELECT count(*) FROM (SELECT 1 FROM jobs
                                  WHERE status = 'pending' AND type = t.type AND run_after > now()
                                  LIMIT :cap + 1) w)::int AS waiting,
           (SELECT min(run_after) FROM jobs WHERE status = 'pending' AND type = t.type AND run_after <= now())
               AS oldest_ready
    FROM app_pending_types() AS t(type)
    WHERE NOT :own_lanes
    UNION ALL
    SELECT t.type,
           (SELECT count(*) FROM (SELECT 1 FROM own l CROSS JOIN LATERAL (
                                      SELECT 1 FROM jobs
                                      WHERE status = 'pending' AND type = t.type AND lane = l.id AND run_after <= now()
                                      LIMIT :cap + 1) x
                                  LIMIT :cap + 1) r)::int,
           (SELECT count(*) FROM (SELECT 1 FROM own l CROSS JOIN LATERAL (
                                      SELECT 1 FROM jobs
                                      WHERE status = 'pending' AND type = t.type AND lane = l.id AND run_after > now()
                                      LIMIT :cap + 1) x
                                  LIMIT :cap + 1) w)::int,
           (SELECT min(o.run_after) FROM own l CROSS JOIN LATERAL (
                SELECT run_after FROM jobs
                WHERE status = 'pending' AND type = t.type AND lane = l.id AND run_after <= now()
                ORDER BY run_after LIMIT 1) o)
    FROM app_pending_types() AS t(type)
    WHERE :own_lanes
), open_jobs AS (
    SELECT type, ready, waiting, 0 AS running, oldest_ready FROM pending WHERE ready > 0 OR waiting > 0
    UNION ALL
    SELECT type, 0, 0, count(*)::int, NULL FROM jobs WHERE status = 'running' GROUP BY type
), ended AS (
    SELECT type, status FROM jobs
    WHERE NOT :own_lanes AND status IN ('done', 'failed', 'cancelled') AND finished_at > now() - interval '1 day'
    UNION ALL
    SELECT f.type, f.status
    FROM own l
    CROSS JOIN LATERAL (
        SELECT type, status FROM jobs
        WHERE lane >= l.id AND lane <= l.id
          AND lane <> '00000000-0000-0000-0000-000000000000'
          AND status IN ('done', 'failed', 'cancelled') AND finished_at > now() - interval '1 day'
        OFFSET 0  -- lane by lane: not flattened into a join against every ending
    ) f
    WHERE :own_lanes
)
SELECT type, least(coalesce(o.ready, 0), :cap) AS ready, coalesce(o.ready, 0) > :cap AS ready_more,
       least(coalesce(o.waiting, 0), :cap) AS waiting, coalesce(o.waiting, 0) > :cap AS waiting_more,
       coalesce(o.running, 0) AS running,
       coalesce(f.done, 0) AS done, coalesce(f.failed, 0) AS failed, coalesce(f.cancelled, 0) AS cancelled,
       o.oldest_ready_seconds
FROM (
    SELECT type, sum(ready)::int AS ready, sum(waiting)::int AS waiting, sum(running)::int AS running,
           extract(epoch FROM now() - min(oldest_ready))::float8 AS oldest_ready_seconds
    FROM open_jobs
    GROUP BY type
) o
FULL JOIN (
    SELECT type, count(*) FILTER (WHERE status = 'done')::int AS done,
           count(*) FILTER (WHERE status = 'failed')::int AS failed,
           count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled
    FROM ended
    GROUP BY type
) f USING (type)
ORDER BY type
