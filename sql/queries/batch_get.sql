-- A batch with its children counted by status and its progress summed, for a progress bar.
SELECT b.id, b.lane, b.status, b.created_at, b.updated_at, b.finished_at,
       count(j.id)::int                                    AS jobs,
       count(*) FILTER (WHERE j.status = 'pending')::int   AS pending,
       count(*) FILTER (WHERE j.status = 'running')::int   AS running,
       count(*) FILTER (WHERE j.status = 'done')::int      AS done,
       count(*) FILTER (WHERE j.status = 'failed')::int    AS failed,
       count(*) FILTER (WHERE j.status = 'cancelled')::int AS cancelled,
       sum(j.total)::bigint                                AS total,
       sum(CASE WHEN j.status = 'done' THEN coalesce(j.progress, j.total, 0)
                ELSE coalesce(j.progress, 0) END)::bigint  AS progress
FROM batches b
LEFT JOIN jobs j ON j.batch_id = b.id
WHERE b.id = :batch_id
GROUP BY b.id
