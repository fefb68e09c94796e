-- The :limit lanes with the most open work (pending or running), with their ranking. :own_only: read
-- the caller's own lanes one by one (a tenant: open jobs off jobs_open_dedupe_uq, never
-- another tenant's) rather than every open job (an admin); the other branch is switched
-- off before it runs.
SELECT j.lane, j.pending, j.running, l.priority, coalesce(l.paused, false) AS paused, l.owner_id
FROM (
    SELECT * FROM (
        SELECT lane, count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'running')::int AS running
        FROM jobs WHERE NOT :own_only::boolean AND status IN ('pending', 'running')
        GROUP BY lane
        UNION ALL
        SELECT m.id, o.pending, o.running
        FROM lanes m
        CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE status = 'pending')::int AS pending,
                   count(*) FILTER (WHERE status = 'running')::int AS running
            -- the lane's rows: see dashboard_queue.sql for why a one-value range
            FROM jobs WHERE lane >= m.id AND lane <= m.id AND status IN ('pending', 'running')
        ) o
        WHERE :own_only AND o.pending + o.running > 0
    ) busy
    ORDER BY pending + running DESC, lane
    LIMIT :limit
) j
LEFT JOIN lanes l ON l.id = j.lane
ORDER BY j.pending + j.running DESC, j.lane
