-- trends_jobs.sql for buckets of half an hour (a day's window), summed from the endings'
-- counters (migration 0052) instead of read from every job that ended: per stage and half
-- hour since :since, the jobs that ended done and failed, and the wait of their last
-- attempt, p50 and p95 in seconds, from the wait classes (two per doubling: the class's
-- middle, within 19% of the waits in it; the class holding the job at the percentile's
-- rank, as percentile_disc picks). Never-claimed jobs (class -1) have no wait.
--
-- :own_lanes: the caller's own lanes one by one off job_endings (a tenant; row-level
-- security on lanes picks them), else every lane's totals off job_endings_by_type (an
-- admin); the other branch is switched off before it runs.
WITH counted AS (
    SELECT type, bucket, wait_class, done, failed FROM job_endings_by_type
    WHERE NOT :own_lanes::boolean AND bucket >= :since::timestamptz AND (done <> 0 OR failed <> 0)
    UNION ALL
    SELECT e.type, e.bucket, e.wait_class, e.done, e.failed
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, bucket, wait_class, done, failed FROM job_endings
        WHERE lane >= l.id AND lane <= l.id  -- a one-value range: see dashboard_queue.sql
          AND bucket >= :since AND (done <> 0 OR failed <> 0)
        OFFSET 0
    ) e
    WHERE :own_lanes
), classes AS (
    SELECT type, bucket, wait_class, sum(done)::int AS done, sum(failed)::int AS failed
    FROM counted
    GROUP BY type, bucket, wait_class
), ranked AS (
    SELECT *, sum(CASE WHEN wait_class >= 0 THEN done + failed ELSE 0 END)
                  OVER (PARTITION BY type, bucket ORDER BY wait_class) AS below,
              sum(CASE WHEN wait_class >= 0 THEN done + failed ELSE 0 END)
                  OVER (PARTITION BY type, bucket) AS claimed
    FROM classes
)
SELECT type, bucket, sum(done)::int AS done, sum(failed)::int AS failed,
       job_wait_class_seconds(min(wait_class) FILTER (WHERE wait_class >= 0 AND claimed > 0 AND below >= 0.5 * claimed))
           AS wait_p50,
       job_wait_class_seconds(min(wait_class) FILTER (WHERE wait_class >= 0 AND claimed > 0 AND below >= 0.95 * claimed))
           AS wait_p95
FROM ranked
GROUP BY type, bucket
HAVING sum(done) <> 0 OR sum(failed) <> 0
ORDER BY type, bucket
