-- Delete up to $2 finished jobs older than $1 hours, oldest first. Bounded, so the
-- table shrinks in short statements that never hold many locks or a long snapshot.
WITH doomed AS (
    SELECT id FROM jobs
    WHERE status IN ('done', 'failed') AND finished_at < now() - make_interval(secs => $1 * 3600)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM doomed))
