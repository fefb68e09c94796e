-- A tenant's :limit lanes with the most open work (pending or running), with their ranking:
-- pending jobs from the counters of the caller's own lanes (app_own_pending_by_lane),
-- running ones off jobs_running_idx (as many as the runs hold; row-level security keeps
-- the caller's), never a count of the lanes' open jobs. An admin's: dashboard_lanes_all.sql.
SELECT j.lane, j.pending, j.running, l.priority, coalesce(l.paused, false) AS paused, l.owner_id
FROM (
    SELECT lane, sum(pending)::int AS pending, sum(running)::int AS running
    FROM (
        SELECT lane, pending, 0::bigint AS running FROM app_own_pending_by_lane()
        UNION ALL
        SELECT lane, 0, count(*) FROM jobs WHERE status = 'running' GROUP BY lane
    ) open
    GROUP BY lane
    ORDER BY sum(pending) + sum(running) DESC, lane
    LIMIT :limit
) j
LEFT JOIN lanes l ON l.id = j.lane
ORDER BY j.pending + j.running DESC, j.lane
