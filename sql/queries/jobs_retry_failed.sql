-- `skiplock jobs retry --failed`: every failed job back to pending, due now, attempts
-- reset (as job_retry.sql does for one). Optional: :type only this type, :within_seconds only jobs that
-- finished in the last :within_seconds seconds; :cancelled cancelled jobs too (by default a cancel stands).
-- A job whose dedupe key another job holds (an open one, waiting included, or one that
-- ended less than its unique_for ago) stays failed, and of failed jobs sharing a key only
-- the newest is retried: the unique index on taken keys would refuse the rest. Ended jobs
-- holding a picked job's key whose windows are over let it go first: the subquery runs
-- once, before any row is updated (jobs_let_go_of_keys, migration 0053).
WITH failed AS (
    SELECT id, lane, dedupe_key, finished_at FROM jobs
    WHERE (status = 'failed' OR (:cancelled AND status = 'cancelled'))
      AND (:type::text IS NULL OR type = :type)
      AND (:within_seconds::float8 IS NULL OR finished_at >= now() - make_interval(secs => :within_seconds))
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT DISTINCT ON (f.lane, coalesce(f.dedupe_key, f.id::text)) f.id
    FROM failed f
    WHERE f.dedupe_key IS NULL
       OR NOT EXISTS (SELECT 1 FROM jobs o WHERE o.lane = f.lane AND o.dedupe_key = f.dedupe_key AND o.id <> f.id
                                             AND (o.status IN ('pending', 'running', 'waiting')
                                                  OR (o.unique_for IS NOT NULL
                                                      AND o.unique_released IS DISTINCT FROM o.finished_at
                                                      AND o.finished_at + o.unique_for > now())))
    ORDER BY f.lane, coalesce(f.dedupe_key, f.id::text), f.finished_at DESC
)
UPDATE jobs j
SET status = 'pending', attempts = 0, run_after = now(), locked_at = NULL, finished_at = NULL,
    cancel_requested_at = NULL
FROM picked
WHERE j.id = picked.id
  AND (SELECT jobs_let_go_of_keys(array_agg(id)) FROM picked) >= 0
RETURNING j.id, j.type
