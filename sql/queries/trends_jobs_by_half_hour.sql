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
    WHERE finished_at >= (SELECT hi FROM rolled) AND status IN ('done', 'failed')
), bucketed AS (
    SELECT *, date_bin(make_interval(secs => :bucket_seconds), at, 'epoch'::timestamptz) AS bucket FROM ended
), classes AS (  -- per stage, bucket and wait class: how many, and how many up to it
    SELECT type, bucket, class, n, sum(n) OVER (PARTITION BY type, bucket ORDER BY class) AS upto,
           sum(n) OVER (PARTITION BY type, bucket) AS total
    FROM (SELECT type, bucket, w.class, sum(w.n) AS n
          FROM bucketed CROSS JOIN LATERAL unnest(waits, wait_counts) AS w(class, n)
          GROUP BY type, bucket, w.class) c
), percentiles AS (
    -- percentile_cont's ranks, p(N - 1) from 0, between its two neighbouring waits: each the
    -- first class whose running count passes it
    SELECT type, bucket, p, r - floor(r) AS frac,
           wait_class_seconds(min(class) FILTER (WHERE upto > floor(r))) AS below,
           wait_class_seconds(min(class) FILTER (WHERE upto > ceil(r))) AS above
    FROM classes CROSS JOIN LATERAL (VALUES (0.5::float8), (0.95)) AS q(p)
         CROSS JOIN LATERAL (SELECT p * (total - 1) AS r) k
    GROUP BY type, bucket, p, r
)
SELECT c.type, c.bucket, c.done, c.failed, w.wait_p50, w.wait_p95
FROM (
    SELECT type, bucket, coalesce(sum(jobs) FILTER (WHERE status = 'done'), 0)::int AS done,
           coalesce(sum(jobs) FILTER (WHERE status = 'failed'), 0)::int AS failed
    FROM bucketed
    GROUP BY type, bucket
) c
LEFT JOIN (
    SELECT type, bucket, max(below + frac * (above - below)) FILTER (WHERE p = 0.5) AS wait_p50,
           max(below + frac * (above - below)) FILTER (WHERE p = 0.95) AS wait_p95
    FROM percentiles
    GROUP BY type, bucket
) w USING (type, bucket)
ORDER BY c.type, c.bucket
