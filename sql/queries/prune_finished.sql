-- Delete up to :limit finished jobs older than :retention_hours hours, oldest first. Bounded, so the
-- table shrinks in short statements that never hold many locks or a long snapshot.
WITH doomed AS (
    SELECT id FROM jobs
    WHERE status IN ('done', 'failed', 'cancelled') AND finished_at < now() - make_interval(secs => :retention_hours * 3600)
    ORDER BY finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM doomed))
