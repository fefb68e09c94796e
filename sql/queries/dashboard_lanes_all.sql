-- An admin's :limit lanes with the most open work (pending or running), with their ranking:
-- pending jobs from the lane counters (app_pending_by_lane, a row per lane and type),
-- running ones off jobs_running_idx (as many as the runs hold), never a count of every
-- open job. A tenant's own lanes: dashboard_lanes.sql.
SELECT j.lane, j.pending, j.running, l.priority, coalesce(l.paused, false) AS paused, l.owner_id
FROM (
    SELECT lane, sum(pending)::int AS pending, sum(running)::int AS running
    FROM (
        SELECT lane, pending, 0::bigint AS running FROM app_pending_by_lane()
        UNION ALL
        SELECT lane, 0, count(*) FROM jobs WHERE status = 'running' GROUP BY lane
    ) open
    GROUP BY lane
    ORDER BY sum(pending) + sum(running) DESC, lane
    LIMIT :limit
) j
LEFT JOIN lanes l ON l.id = j.lane
ORDER BY j.pending + j.running DESC, j.lane
