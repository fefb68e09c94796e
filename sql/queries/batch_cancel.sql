-- Cancel an open batch: it stops at once; its children that have not started are
-- cancelled, and running ones get a cancel request that the run holding each one ends
-- (as job_cancel.sql does for one job). One row per child changed (status 'cancelled':
-- its stage's cancelled hook runs now; 'running': its holder runs it), or a single row of
-- nulls when none was; every row says whether the batch was open.
WITH b AS (
    UPDATE batches SET status = 'cancelled', updated_at = now(), finished_at = now()
    WHERE id = :batch_id AND status IN ('pending', 'running')
    RETURNING id
), j AS (
    UPDATE jobs
    SET status              = CASE WHEN jobs.status IN ('pending', 'waiting') THEN 'cancelled' ELSE jobs.status END,
        finished_at         = CASE WHEN jobs.status IN ('pending', 'waiting') THEN now() ELSE jobs.finished_at END,
        locked_at           = CASE WHEN jobs.status IN ('pending', 'waiting') THEN NULL ELSE jobs.locked_at END,
        cancel_requested_at = coalesce(jobs.cancel_requested_at, now())
    FROM b
    WHERE jobs.batch_id = b.id AND jobs.status IN ('pending', 'running', 'waiting')
    RETURNING jobs.id, jobs.type, jobs.status, jobs.payload, jobs.attempts, jobs.lane, jobs.run_id,
              jobs.batch_id, jobs.dedupe_key, jobs.created_at
)
SELECT (SELECT count(*) FROM b) = 1 AS cancelled, j.*
FROM (SELECT 1) AS one
LEFT JOIN j ON true
