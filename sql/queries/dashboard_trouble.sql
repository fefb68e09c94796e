-- The dashboard's jobs in trouble, at most :limit of each: failed ones, newest first (Retry),
-- pending ones whose last attempt failed and that wait out their backoff, soonest first
-- (Cancel), and running ones, held longest first (Cancel: their run stops them). Row-level
-- security keeps a tenant to its own.
--
-- :own_lanes: read the caller's own lanes one by one (a tenant: off jobs_lane_list_idx and
-- jobs_open_dedupe_uq, never another tenant's jobs) rather than all jobs (an admin: off
-- jobs_finished_idx and the open jobs); the other branch is switched off before it runs.
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
 WHERE NOT :own_lanes::boolean AND status = 'failed'
 ORDER BY finished_at DESC  -- jobs_finished_idx's order, backwards (NULLS LAST would sort every failed job)
 LIMIT :limit)
UNION ALL
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
 WHERE NOT :own_lanes AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0  -- not a retry a person asked for
 ORDER BY run_after
 LIMIT :limit)
UNION ALL
(SELECT f.* FROM lanes l
 CROSS JOIN LATERAL (
     SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
     -- the lane's rows: see dashboard_queue.sql for why a one-value range
     WHERE lane >= l.id AND lane <= l.id
       AND lane <> '00000000-0000-0000-0000-000000000000' AND status = 'failed'
     ORDER BY lane, finished_at DESC NULLS LAST  -- the lane, so jobs_finished_idx cannot serve it
     LIMIT :limit
 ) f
 WHERE :own_lanes
 ORDER BY f.finished_at DESC NULLS LAST
 LIMIT :limit)
UNION ALL
(SELECT p.* FROM lanes l
 CROSS JOIN LATERAL (
     SELECT id, type, status, attempts, last_error, run_after, finished_at, lane, locked_at,
            cancel_requested_at FROM jobs
     WHERE lane >= l.id AND lane <= l.id AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0
     ORDER BY run_after
     LIMIT :limit
 ) p
 WHERE :own_lanes
 ORDER BY p.run_after
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
