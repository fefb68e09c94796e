-- Forget up to $2 idempotency keys older than $1 hours, oldest first (bounded, like the
-- pruning of finished jobs). A key still in progress that old was abandoned.
WITH doomed AS (
    SELECT key FROM idempotency_keys
    WHERE created_at < now() - make_interval(secs => $1 * 3600)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys WHERE key IN (SELECT key FROM doomed)
