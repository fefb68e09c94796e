-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done, failed and cancelled of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Row-level security keeps a tenant to its own jobs.
--
-- The last day is the half hours that overlap it (from the start of the one 24 hours
-- ago: 24 to 24.5 hours), summed from the endings' counters (migration 0052), never the
-- jobs that ended: job_endings_by_type for an admin (every lane), job_endings lane by lane
-- from the caller's own lanes for a tenant (row-level security on lanes picks them).
--
-- Open jobs: ready and waiting are counted up to :cap (ready_more / waiting_more: there
-- are more), per type from app_pending_types(), so a backlog of any size reads at most
-- :cap + 1 entries of each; the oldest due job is one probe. An admin's off jobs_due_idx
-- (type, run_after); a tenant's lane by lane from its own lanes (row-level security on
-- lanes picks them) off jobs_wake_idx (type, lane, run_after), so a tenant's dashboard
-- never reads another tenant's pending jobs. :own_lanes chooses the branch; the other is
-- switched off before it runs. Running jobs are as many as the runs hold: counted.
WITH pending AS (
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
    WHERE NOT :own_lanes::boolean
    UNION ALL
    SELECT t.type,
           (SELECT count(*) FROM (SELECT 1 FROM lanes l CROSS JOIN LATERAL (
                                      SELECT 1 FROM jobs
                                      WHERE status = 'pending' AND type = t.type AND lane = l.id AND run_after <= now()
                                      LIMIT :cap + 1) x
                                  LIMIT :cap + 1) r)::int,
           (SELECT count(*) FROM (SELECT 1 FROM lanes l CROSS JOIN LATERAL (
                                      SELECT 1 FROM jobs
                                      WHERE status = 'pending' AND type = t.type AND lane = l.id AND run_after > now()
                                      LIMIT :cap + 1) x
                                  LIMIT :cap + 1) w)::int,
           (SELECT min(o.run_after) FROM lanes l CROSS JOIN LATERAL (
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
    SELECT type, sum(done)::int AS done, sum(failed)::int AS failed, sum(cancelled)::int AS cancelled
    FROM ended
    GROUP BY type
    HAVING sum(done) <> 0 OR sum(failed) <> 0 OR sum(cancelled) <> 0
) f USING (type)
ORDER BY type
