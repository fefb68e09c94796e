-- Cancel an open batch: it stops at once; its children that have not started are failed as
-- cancelled; running ones are left to finish under their holder. One row per cancelled job
-- (for its stage's cancelled hook), or a single row of nulls when none was; every row says
-- whether the batch was open.
WITH b AS (
    UPDATE batches SET status = 'cancelled', updated_at = now(), finished_at = now()
    WHERE id = :batch_id AND status IN ('pending', 'running')
    RETURNING id
), j AS (
    UPDATE jobs
    SET status = 'failed', finished_at = now(), last_error = 'cancelled with its batch'
    FROM b
    WHERE jobs.batch_id = b.id AND jobs.status = 'pending'
    RETURNING jobs.id, jobs.type, jobs.payload, jobs.attempts, jobs.lane, jobs.run_id,
              jobs.batch_id, jobs.dedupe_key, jobs.created_at
)
SELECT (SELECT count(*) FROM b) = 1 AS cancelled, j.*
FROM (SELECT 1) AS one
LEFT JOIN j ON true
