-- The dashboard's batches: open ones first, then the newest, $1 of them, each with its
-- children counted and its progress summed as GET /batches/{id} does.
SELECT b.id, b.status, b.created_at, b.finished_at, c.jobs, c.done, c.failed, c.total, c.progress
FROM (
    SELECT id, status, created_at, finished_at FROM batches
    ORDER BY status IN ('pending', 'running') DESC, created_at DESC
    LIMIT $1
) b
CROSS JOIN LATERAL (
    SELECT count(*)::int AS jobs,
           count(*) FILTER (WHERE j.status = 'done')::int AS done,
           count(*) FILTER (WHERE j.status = 'failed')::int AS failed,
           sum(j.total)::bigint AS total,
           sum(CASE WHEN j.status = 'done' THEN coalesce(j.progress, j.total, 0)
                    ELSE coalesce(j.progress, 0) END)::bigint AS progress
    FROM jobs j WHERE j.batch_id = b.id
) c
ORDER BY b.status IN ('pending', 'running') DESC, b.created_at DESC
