-- The dashboard's batches: open ones first, then the newest, :limit of them, each with its
-- children counted and its progress summed as GET /batches/{id} does.
--
-- :own_lanes: read the caller's own lanes one by one (a tenant: off batches_lane_idx, never
-- another tenant's batches) rather than sort every batch and let row-level security drop
-- the others' (an admin reads them all); the other branch is switched off before it runs.
SELECT b.id, b.status, b.created_at, b.finished_at, c.jobs, c.done, c.failed, c.total, c.progress
FROM (
    SELECT id, status, created_at, finished_at FROM (
        (SELECT id, status, created_at, finished_at FROM batches
         WHERE NOT :own_lanes::boolean
         ORDER BY status IN ('pending', 'running') DESC, created_at DESC
         LIMIT :limit)
        UNION
        (SELECT o.id, o.status, o.created_at, o.finished_at FROM lanes l
         CROSS JOIN LATERAL (
             (SELECT id, status, created_at, finished_at FROM batches
              WHERE lane = l.id AND status IN ('pending', 'running')
              ORDER BY created_at DESC
              LIMIT :limit)
             UNION ALL
             (SELECT id, status, created_at, finished_at FROM batches
              WHERE lane = l.id
              ORDER BY created_at DESC
              LIMIT :limit)
         ) o
         WHERE :own_lanes)
    ) candidates
    ORDER BY status IN ('pending', 'running') DESC, created_at DESC
    LIMIT :limit
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
