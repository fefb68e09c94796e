-- The dashboard's queue, per job type: ready (pending and due), waiting (pending, not
-- yet due), running, and the done, failed and cancelled of the last day, with the age in seconds of
-- the oldest job that is due and waiting. Row-level security keeps a tenant to its own jobs.
--
-- The last day's endings: the minutes rolled up (migration 0055; the caller rolls closed
-- minutes up first) from the rollups' rows, the first half hour's minutes from
-- job_endings_by_minute, the rest from job_endings_by_half_hour (about 50 rows a type and
-- ending for an admin's every-lane rows; a tenant's lane by lane from its own lanes); the
-- rest of the day live, a range of jobs_finished_idx: the part of the first minute inside
-- the day, and the minutes since the last rolled up (a few). Row-level security keeps a
-- tenant's live endings its own.
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
), rolled AS MATERIALIZED (  -- the day's minutes read from the rollups: [lo, hi)
    SELECT lo, hi,
           -- the first half hour's start at or after lo: the minutes before it come from
           -- their own rows, those after from their half hours' rows
           least(CASE WHEN date_bin(interval '30 minutes', lo, 'epoch'::timestamptz) = lo THEN lo
                      ELSE date_bin(interval '30 minutes', lo, 'epoch'::timestamptz) + interval '30 minutes' END,
                 hi) AS edge
    FROM (SELECT greatest(day_minute, m.rolled_from) AS lo, greatest(day_minute, m.rolled_from, m.rolled_to) AS hi
          FROM (SELECT date_trunc('minute', now() - interval '1 day') + interval '1 minute' AS day_minute) d
          LEFT JOIN job_endings_rolled m ON true  -- no row: none rolled up (greatest leaves out NULLs)
         ) b
), ended AS (
    -- a half hour's row holds its minutes rolled up: those from edge on are all in [lo, hi)
    SELECT e.type, e.status, e.jobs
    FROM job_endings_by_minute e
    WHERE e.lane IS NULL AND e.minute >= (SELECT lo FROM rolled) AND e.minute < (SELECT edge FROM rolled)
      AND NOT :own_lanes
    UNION ALL
    SELECT e.type, e.status, e.jobs
    FROM job_endings_by_half_hour e
    WHERE e.lane IS NULL AND e.half_hour >= (SELECT edge FROM rolled) AND (SELECT edge < hi FROM rolled)
      AND NOT :own_lanes
    UNION ALL
    SELECT e.type, e.status, e.jobs
    FROM own l
    CROSS JOIN LATERAL (
        SELECT type, status, jobs FROM job_endings_by_minute
        WHERE lane = l.id AND minute >= (SELECT lo FROM rolled) AND minute < (SELECT edge FROM rolled)
        UNION ALL
        SELECT type, status, jobs FROM job_endings_by_half_hour
        WHERE lane = l.id AND half_hour >= (SELECT edge FROM rolled) AND (SELECT edge < hi FROM rolled)
        OFFSET 0  -- lane by lane: not flattened into a join against every lane's rows
    ) e
    WHERE :own_lanes
    UNION ALL
    SELECT type, status, 1 FROM jobs
    WHERE finished_at > now() - interval '1 day' AND finished_at < (SELECT lo FROM rolled)
      AND status IN ('done', 'failed', 'cancelled')
    UNION ALL
    SELECT type, status, 1 FROM jobs
    WHERE finished_at >= (SELECT hi FROM rolled) AND finished_at < 'infinity'  -- a range: estimated small
      AND status IN ('done', 'failed', 'cancelled')
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
    SELECT type, sum(jobs) FILTER (WHERE status = 'done')::int AS done,
           sum(jobs) FILTER (WHERE status = 'failed')::int AS failed,
           sum(jobs) FILTER (WHERE status = 'cancelled')::int AS cancelled
    FROM ended
    GROUP BY type
) f USING (type)
ORDER BY type
