-- The $1 lanes with the most open work (pending or running), with their ranking.
SELECT j.lane, j.pending, j.running, l.priority, coalesce(l.paused, false) AS paused, l.owner_id
FROM (
    SELECT lane, count(*) FILTER (WHERE status = 'pending')::int AS pending,
           count(*) FILTER (WHERE status = 'running')::int AS running
    FROM jobs WHERE status IN ('pending', 'running')
    GROUP BY lane
    ORDER BY count(*) DESC, lane
    LIMIT $1
) j
LEFT JOIN lanes l ON l.id = j.lane
ORDER BY j.pending + j.running DESC, j.lane
