-- GET /jobs read lane by lane: a tenant's page (its own lanes, $7 NULL) or an admin's for
-- one lane ($7 that lane), the page of jobs_list.sql without walking every job. Lanes
-- come from $7, else from `lanes` (row-level security leaves a tenant its own); each gives
-- its newest $6 after the cursor off jobs_lane_list_idx, which leaves running jobs and
-- the all-zero lane out. Running jobs are only as many as the runs hold, so they are read
-- apart (off jobs_running_idx; row-level security keeps a tenant's). The page is the
-- newest $6 of both: a tenant's page never reads another tenant's pending or finished
-- jobs. $1 status, $2 type, $3 lane, $4 batch (each optional), $5 the cursor's job, $6
-- how many, $7 the lanes to read (never the all-zero lane; NULL: the caller's own).
SELECT *
FROM (
    SELECT j.*
    FROM (SELECT id FROM lanes WHERE $7::uuid[] IS NULL AND ($3::uuid IS NULL OR id = $3)
          UNION ALL
          SELECT unnest($7::uuid[])) l
    CROSS JOIN LATERAL (
        SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
               run_id, batch_id, lane, total, progress, created_at, finished_at
        FROM jobs
        WHERE lane >= l.id AND lane <= l.id  -- the lane, without an equality: see the ORDER BY
          AND lane <> '00000000-0000-0000-0000-000000000000' AND status <> 'running'
          AND id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
          AND ($1::text IS NULL OR status = $1)
          AND ($2::text IS NULL OR type = $2)
          AND ($4::uuid IS NULL OR batch_id = $4)
        -- One lane, newest first, in the lane index's order. Were the lane named by an
        -- equality, the planner would treat it as fixed and drop it from this order, and a
        -- generic plan could then walk the primary key instead, betting (on a lane with half
        -- the table) that the lane's rows come soon: it read 300,000 of another tenant's
        -- jobs to find a tenant's ten.
        ORDER BY lane DESC, id DESC
        LIMIT $6
    ) j
    UNION ALL
    SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
           run_id, batch_id, lane, total, progress, created_at, finished_at
    FROM jobs
    WHERE status = 'running' AND ($1::text IS NULL OR $1 = 'running')
      AND id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
      AND ($2::text IS NULL OR type = $2)
      AND ($3::uuid IS NULL OR lane = $3)
      AND ($4::uuid IS NULL OR batch_id = $4)
) page
ORDER BY id DESC
LIMIT $6
