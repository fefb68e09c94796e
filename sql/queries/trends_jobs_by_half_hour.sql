-- trends_jobs.sql's figures from the endings rolled up (job_endings_by_half_hour,
-- migration 0055; the caller rolls closed minutes up first), for buckets of whole half
-- hours from :since (a half hour): per stage and bucket of :bucket_seconds, how many ended
-- done and failed, and the wait p50 and p95 in seconds, taken over the half hours' wait
-- classes, each wait standing for its class's middle (within 9% of the exact percentile,
-- or under a millisecond off below 1 ms; see wait_class). The minutes since the last
-- rolled up are read live off jobs_finished_idx and classed the same way. An admin reads
-- the every-lane rows, a tenant its own lanes' rows lane by lane; row-level security keeps
-- a tenant's live endings its own.
WITH rolled AS MATERIALIZED (  -- the minutes read from the rollups: [lo, hi)
    SELECT greatest(since, m.rolled_from) AS lo, greatest(since, m.rolled_from, m.rolled_to) AS hi
    FROM (SELECT :since::timestamptz AS since) s
    LEFT JOIN job_endings_rolled m ON true  -- no row: none rolled up (greatest leaves out NULLs)
), ended AS (
    -- a half hour's row holds exactly its minutes in [lo, hi): the window's half hours from
    -- :since hold no minute before lo, and none at or after hi is rolled up yet
    SELECT e.half_hour AS at, e.type, e.status, e.jobs, e.waits, e.wait_counts
    FROM job_endings_by_half_hour e
    WHERE e.lane IS NULL AND e.half_hour >= :since AND NOT :own_lanes::boolean AND e.status IN ('done', 'failed')
    UNION ALL
    SELECT e.half_hour, e.type, e.status, e.jobs, e.waits, e.wait_counts
    FROM (SELECT id FROM lanes WHERE :own_lanes OFFSET 0) l
    CROSS JOIN LATERAL (
        SELECT * FROM job_endings_by_half_hour
        WHERE lane = l.id AND half_hour >= :since AND status IN ('done', 'failed')
        OFFSET 0  -- lane by lane: not flattened into a join against every lane's rows
    ) e
    UNION ALL
    SELECT finished_at, type, status, 1,
           CASE WHEN locked_at IS NULL THEN '{}' ELSE ARRAY[job_wait_class(locked_at, run_after)] END,
           CASE WHEN locked_at IS NULL THEN '{}' ELSE '{1}'::bigint[] END
    FROM jobs
    WHERE finished_at >= :since AND finished_at < (SELECT lo FROM rolled) AND status IN ('done', 'failed')
    UNION ALL
    SELECT finished_at, type, status, 1,
           CASE WHEN locked_at IS NULL THEN '{}' ELSE ARRAY[job_wait_class(locked_at, run_after)] END,
           CASE WHEN locked_at IS NULL THEN '{}' ELSE '{1}'::bigint[] END
    FROM jobs
    WHERE finished_at >= (SELECT hi FROM rolled) AND finished_at < 'infinity'  -- a range: estimated small
      AND status IN ('done', 'failed')
), bucketed AS (
    SELECT *, date_bin(make_interval(secs => :bucket_seconds), at, 'epoch'::timestamptz) AS bucket FROM ended
), classes AS (  -- per stage, bucket and wait class: how many, and how many up to it (float8: exact)
    SELECT type, bucket, class, sum(n) OVER (PARTITION BY type, bucket ORDER BY class) AS upto,
           sum(n) OVER (PARTITION BY type, bucket) AS total
    FROM (SELECT type, bucket, w.class, sum(w.n)::float8 AS n
          FROM bucketed CROSS JOIN LATERAL unnest(waits, wait_counts) AS w(class, n)
          GROUP BY type, bucket, w.class) c
), neighbours AS (
    -- percentile_cont's rank p(N - 1) from 0 lies between two waits: each the first class
    -- whose running count passes it
    SELECT type, bucket, 0.5 * (max(total) - 1) AS r50, 0.95 * (max(total) - 1) AS r95,
           wait_class_seconds(min(class) FILTER (WHERE upto > floor(0.5 * (total - 1)))) AS below50,
           wait_class_seconds(min(class) FILTER (WHERE upto > ceil(0.5 * (total - 1)))) AS above50,
           wait_class_seconds(min(class) FILTER (WHERE upto > floor(0.95 * (total - 1)))) AS below95,
           wait_class_seconds(min(class) FILTER (WHERE upto > ceil(0.95 * (total - 1)))) AS above95
    FROM classes
    GROUP BY type, bucket
)
SELECT c.type, c.bucket, c.done, c.failed,
       w.below50 + (w.r50 - floor(w.r50)) * (w.above50 - w.below50) AS wait_p50,
       w.below95 + (w.r95 - floor(w.r95)) * (w.above95 - w.below95) AS wait_p95
FROM (
    SELECT type, bucket, coalesce(sum(jobs) FILTER (WHERE status = 'done'), 0)::int AS done,
           coalesce(sum(jobs) FILTER (WHERE status = 'failed'), 0)::int AS failed
    FROM bucketed
    GROUP BY type, bucket
) c
LEFT JOIN neighbours w USING (type, bucket)
ORDER BY c.type, c.bucket
