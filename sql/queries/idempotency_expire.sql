-- Forget up to :limit idempotency keys older than :retention_hours hours, oldest first (bounded, like the
-- pruning of finished jobs). A key still in progress that old was abandoned.
WITH doomed AS (
    SELECT key FROM idempotency_keys
    WHERE created_at < now() - make_interval(secs => :retention_hours * 3600)
    ORDER BY created_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys WHERE key IN (SELECT key FROM doomed)
