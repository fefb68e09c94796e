-- Cancel an open batch: it stops at once; its children that have not started are failed as
-- cancelled; running ones are left to finish under their holder.
WITH b AS (
    UPDATE batches SET status = 'cancelled', updated_at = now(), finished_at = now()
    WHERE id = $1 AND status IN ('pending', 'running')
    RETURNING id
), j AS (
    UPDATE jobs
    SET status = 'failed', finished_at = now(), last_error = 'cancelled with its batch'
    FROM b
    WHERE jobs.batch_id = b.id AND jobs.status = 'pending'
    RETURNING jobs.id
)
SELECT (SELECT count(*) FROM b) = 1 AS cancelled, ARRAY(SELECT id FROM j) AS job_ids
