-- trends_jobs.sql's figures from the minutes rolled up (job_endings_by_minute, migration
-- 0055; the caller rolls closed minutes up first), for windows of whole minutes (:since and
-- :bucket_seconds whole minutes): per stage and bucket of :bucket_seconds, how many ended
-- done and failed, and the wait p50 and p95 in seconds, merged from the minutes' wait
-- classes (within 9% of the exact percentile, or under a millisecond off below 1 ms; see
-- wait_class). The minutes since the last rolled up are read live off jobs_finished_idx
-- and classed the same way. An admin reads the every-lane rows, a tenant its own lanes'
-- rows lane by lane; row-level security keeps a tenant's live endings its own.
WITH rolled AS MATERIALIZED (  -- the minutes read from their rows: [lo, hi)
    SELECT greatest(since, m.rolled_from) AS lo, greatest(since, m.rolled_from, m.rolled_to) AS hi
    FROM (SELECT :since::timestamptz AS since) s
    LEFT JOIN job_endings_rolled m ON true  -- no row: none rolled up (greatest leaves out NULLs)
), ended AS (
    SELECT e.minute AS at, e.type, e.status, e.jobs, e.waits, e.wait_counts
    FROM job_endings_by_minute e
    WHERE e.lane IS NULL AND e.minute >= (SELECT lo FROM rolled) AND e.minute < (SELECT hi FROM rolled)
      AND NOT :own_lanes::boolean AND e.status IN ('done', 'failed')
    UNION ALL
    SELECT e.minute, e.type, e.status, e.jobs, e.waits, e.wait_counts
    FROM (SELECT id FROM lanes WHERE :own_lanes) l
    CROSS JOIN LATERAL (
        SELECT * FROM job_endings_by_minute
        WHERE lane = l.id AND minute >= (SELECT lo FROM rolled) AND minute < (SELECT hi FROM rolled)
          AND status IN ('done', 'failed')
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
)
SELECT c.type, c.bucket, c.done, c.failed,
       wait_percentile(w.classes, w.counts, 0.5) AS wait_p50,
       wait_percentile(w.classes, w.counts, 0.95) AS wait_p95
FROM (
    SELECT type, bucket, coalesce(sum(jobs) FILTER (WHERE status = 'done'), 0)::int AS done,
           coalesce(sum(jobs) FILTER (WHERE status = 'failed'), 0)::int AS failed
    FROM bucketed
    GROUP BY type, bucket
) c
LEFT JOIN (
    SELECT type, bucket, array_agg(w.class) AS classes, array_agg(w.n) AS counts
    FROM bucketed CROSS JOIN LATERAL unnest(waits, wait_counts) AS w(class, n)
    GROUP BY type, bucket
) w USING (type, bucket)
ORDER BY c.type, c.bucket
