-- The dashboard's jobs in trouble, at most :limit of each: failed ones, newest first (Retry),
-- pending ones whose last attempt failed and that wait out their backoff, soonest first
-- (Cancel), and running ones, held longest first (Cancel: their run stops them). Row-level
-- security keeps a tenant to its own.
--
-- :own_lanes: read the caller's own lanes one by one (a tenant, never another tenant's
-- jobs) rather than all jobs (an admin); the other branch is switched off before it runs.
-- Failed and retrying jobs come off partial indexes that hold only those (migration 0050:
-- jobs_failed_idx, jobs_retrying_idx; per lane jobs_failed_lane_idx, jobs_retrying_lane_idx),
-- running ones off jobs_running_idx: each branch reads about :limit rows per lane it reads.
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
 WHERE NOT :own_lanes::boolean AND status = 'failed'
 ORDER BY finished_at DESC, id DESC  -- jobs_failed_idx's order, backwards (NULLS LAST would sort every failed job)
 LIMIT :limit)
UNION ALL
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
 WHERE NOT :own_lanes AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0  -- not a retry a person asked for
 ORDER BY run_after, id  -- jobs_retrying_idx's order
 LIMIT :limit)
UNION ALL
(SELECT f.* FROM lanes l
 CROSS JOIN LATERAL (
     SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
     -- the lane's rows: see dashboard_queue.sql for why a one-value range
     WHERE lane >= l.id AND lane <= l.id
       AND lane <> '00000000-0000-0000-0000-000000000000' AND status = 'failed'
     ORDER BY lane, finished_at DESC NULLS LAST, id DESC  -- jobs_failed_lane_idx's order (the lane: a range)
     LIMIT :limit
 ) f
 WHERE :own_lanes
 ORDER BY f.finished_at DESC NULLS LAST, f.id DESC
 LIMIT :limit)
UNION ALL
(SELECT p.* FROM lanes l
 CROSS JOIN LATERAL (
     SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
     WHERE lane >= l.id AND lane <= l.id AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0
     ORDER BY lane, run_after, id  -- jobs_retrying_lane_idx's order (the lane: a range)
     LIMIT :limit
 ) p
 WHERE :own_lanes
 ORDER BY p.run_after, p.id
 LIMIT :limit)
UNION ALL
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
        cancel_requested_at FROM jobs
 WHERE NOT :own_lanes AND status = 'running'  -- off jobs_running_idx: a handful
 ORDER BY locked_at
 LIMIT :limit)
UNION ALL
(SELECT r.* FROM lanes l
 CROSS JOIN LATERAL (
     SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
     WHERE lane >= l.id AND lane <= l.id AND status = 'running'
     ORDER BY locked_at
     LIMIT :limit
 ) r
 WHERE :own_lanes
 ORDER BY r.locked_at
 LIMIT :limit)
