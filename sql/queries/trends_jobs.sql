-- Jobs that ended since :since, per stage and bucket of :bucket_seconds (date_bin from the
-- epoch, so buckets line up across calls): how many ended done and failed (a cancel is not a
-- failure), and the wait of their last attempt from due (run_after) to start (locked_at),
-- p50 and p95 in seconds. Row-level security keeps a tenant to its own jobs.
--
-- :own_lanes: read the caller's own lanes one by one (a tenant: off jobs_lane_list_idx, as
-- dashboard_queue.sql does, never another tenant's jobs) rather than every ending since
-- :since off jobs_finished_idx (an admin: a range of that index, never the whole table);
-- the other branch is switched off before it runs.
WITH ended AS (
    SELECT type, status, last_error, finished_at, locked_at, run_after FROM jobs
    WHERE NOT :own_lanes::boolean AND status IN ('done', 'failed') AND finished_at >= :since::timestamptz
    UNION ALL
    SELECT e.type, e.status, e.last_error, e.finished_at, e.locked_at, e.run_after
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT type, status, last_error, finished_at, locked_at, run_after FROM jobs
        WHERE lane >= l.id AND lane <= l.id  -- a one-value range: see dashboard_queue.sql
          AND lane <> '00000000-0000-0000-0000-000000000000'
          AND status IN ('done', 'failed') AND finished_at >= :since
        OFFSET 0  -- lane by lane: not flattened into a join against every ending
    ) e
    WHERE :own_lanes
)
SELECT type,
       date_bin(make_interval(secs => :bucket_seconds), finished_at, 'epoch'::timestamptz) AS bucket,
       count(*) FILTER (WHERE status = 'done')::int AS done,
       count(*) FILTER (WHERE status = 'failed')::int AS failed,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) AS wait_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY wait) AS wait_p95
FROM (
    -- a job never claimed (locked_at NULL) has no wait: NULL, which percentile_cont leaves out
    SELECT *, CASE WHEN locked_at IS NOT NULL
                   THEN greatest(extract(epoch FROM locked_at - run_after), 0)::float8 END AS wait
    FROM ended
) w
GROUP BY type, bucket
ORDER BY type, bucket
