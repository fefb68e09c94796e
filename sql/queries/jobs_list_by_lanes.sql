-- GET /jobs read lane by lane: a tenant's page (its own lanes, :lanes NULL) or an admin's for
-- one lane (:lanes that lane), the page of jobs_list.sql without walking every job. Lanes
-- come from :lanes, else from `lanes` (row-level security leaves a tenant its own); each gives
-- its newest :limit after the cursor off jobs_lane_list_idx, which leaves running jobs and
-- the all-zero lane out. Running jobs are only as many as the runs hold, so they are read
-- apart (off jobs_running_idx; row-level security keeps a tenant's). The page is the
-- newest :limit of both: a tenant's page never reads another tenant's pending or finished
-- jobs. :status status, :type type, :lane lane, :batch_id batch, :since / :until created in
-- [since, until), :error text in last_error (each optional), :after the cursor's job, :limit
-- how many, :lanes the lanes to read (never the all-zero lane; NULL: the caller's own).
-- With :error each lane is walked off jobs_error_lane_idx: only its jobs that have an error.
-- With :until or :since each lane is walked between the ids they bound, and the jobs outside
-- them created in [:since, :until) read off jobs_created_apart_idx: see jobs_list.sql.
-- Run with a plan made for the values (list_jobs): a generic one reads every job of the
-- lanes rather than :limit of each.
SELECT *
FROM (
    SELECT j.*
    FROM (SELECT id FROM lanes WHERE :lanes::uuid[] IS NULL AND (:lane::uuid IS NULL OR id = :lane)
          UNION ALL
          SELECT unnest(:lanes::uuid[])) l
    CROSS JOIN LATERAL (
        SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
               run_id, batch_id, lane, priority, total, progress, created_at, finished_at
        FROM jobs
        -- the lane's ids from the one :since bounds up to the one :after or :until bounds,
        -- as row comparisons: the index walk starts at one and stops at the other. (Beside
        -- a range of the lane, the walk starts at the lane's end and an id bound only
        -- filters.) The lane is never an equality: see the ORDER BY.
        WHERE (lane, id) < (l.id, least(coalesce(:after::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'),
                                        coalesce(job_id_bound(:until::timestamptz), 'ffffffff-ffff-ffff-ffff-ffffffffffff')))
          AND (lane, id) >= (l.id, coalesce(job_id_floor(:since::timestamptz), '00000000-0000-0000-0000-000000000000'))
          AND lane <> '00000000-0000-0000-0000-000000000000' AND status <> 'running'
          AND (:status::text IS NULL OR status = :status)
          AND (:type::text IS NULL OR type = :type)
          AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
          AND (:since::timestamptz IS NULL OR created_at >= :since)
          AND (:until::timestamptz IS NULL OR created_at < :until)
          AND (:error::text IS NULL OR last_error IS NOT NULL AND strpos(lower(last_error), lower(:error)) > 0)
        -- One lane, newest first, in the lane index's order. Were the lane named by an
        -- equality, the planner would treat it as fixed and drop it from this order, and a
        -- generic plan could then walk the primary key instead, betting (on a lane with half
        -- the table) that the lane's rows come soon: it read 300,000 of another tenant's
        -- jobs to find a tenant's ten.
        ORDER BY lane DESC, id DESC
        LIMIT :limit
    ) j
    UNION ALL
    -- the lanes' jobs created in [:since, :until) whose ids lie outside the bounds
    (SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
            run_id, batch_id, lane, priority, total, progress, created_at, finished_at
     FROM jobs
     WHERE (:until::timestamptz IS NOT NULL OR :since::timestamptz IS NOT NULL)
       -- jobs_created_apart_idx's predicate
       AND (to_timestamp(('x' || left(encode(uuid_send(id), 'hex'), 12))::bit(48)::bigint / 1000.0) - created_at
            BETWEEN interval '-1 minute' AND interval '1 minute') IS NOT TRUE
       AND (id >= coalesce(job_id_bound(:until), 'ffffffff-ffff-ffff-ffff-ffffffffffff')
            OR id < coalesce(job_id_floor(:since), '00000000-0000-0000-0000-000000000000'))
       AND id < coalesce(:after::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
       AND lane IN (SELECT id FROM lanes WHERE :lanes::uuid[] IS NULL AND (:lane::uuid IS NULL OR id = :lane)
                    UNION ALL
                    SELECT unnest(:lanes::uuid[]))
       AND lane <> '00000000-0000-0000-0000-000000000000' AND status <> 'running'
       AND (:status::text IS NULL OR status = :status)
       AND (:type::text IS NULL OR type = :type)
       AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
       AND (:since::timestamptz IS NULL OR created_at >= :since)
       AND (:until::timestamptz IS NULL OR created_at < :until)
       AND (:error::text IS NULL OR last_error IS NOT NULL AND strpos(lower(last_error), lower(:error)) > 0)
     ORDER BY id DESC
     LIMIT :limit)
    UNION ALL
    SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
           run_id, batch_id, lane, priority, total, progress, created_at, finished_at
    FROM jobs
    WHERE status = 'running' AND (:status::text IS NULL OR :status = 'running')
      AND id < coalesce(:after::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
      AND (:type::text IS NULL OR type = :type)
      AND (:lane::uuid IS NULL OR lane = :lane)
      AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
      AND (:since::timestamptz IS NULL OR created_at >= :since)
      AND (:until::timestamptz IS NULL OR created_at < :until)
      AND (:error::text IS NULL OR last_error IS NOT NULL AND strpos(lower(last_error), lower(:error)) > 0)
) page
ORDER BY id DESC
LIMIT :limit
