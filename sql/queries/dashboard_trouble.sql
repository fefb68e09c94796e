-- The dashboard's jobs in trouble, at most $1 of each: failed ones, newest first (Retry),
-- and pending ones whose last attempt failed and that wait out their backoff, soonest
-- first (Cancel). Row-level security keeps a tenant to its own.
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane FROM jobs
 WHERE status = 'failed'
 ORDER BY finished_at DESC NULLS LAST
 LIMIT $1)
UNION ALL
(SELECT id, type, status, attempts, last_error, run_after, finished_at, lane FROM jobs
 WHERE status = 'pending' AND last_error IS NOT NULL AND attempts > 0  -- not a retry a person asked for
 ORDER BY run_after
 LIMIT $1)
