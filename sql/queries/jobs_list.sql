-- GET /jobs: newest first, one keyset page. Filters are optional (:status status, :type type,
-- :lane lane, :batch_id batch, :since / :until created in [since, until), :error text found in
-- last_error, any case); the page starts strictly after the job :after when given. Job ids grow
-- with creation time (migration 0026), so the primary key serves the page however deep it
-- is, walked back from the bound (never NULL), in a plan made for the values: list_jobs
-- (app/engine/job_admin.py) asks for one. A generic plan, expecting one row to pass the
-- seven optional filters, reads and sorts every job instead (32,529 buffers at 1M jobs).
-- With :error the page walks jobs_error_idx back instead: only the jobs that have an error
-- (migration 0052; `last_error IS NOT NULL` names the index's predicate); with :ids too
-- (the few jobs whose error holds the text: jobs_error_matches.sql) it reads just those.
-- With :until or :since the walk runs between job_id_floor(:since) and job_id_bound(:until)
-- (migration 0055): a job's id is made when its row is written, its created_at when its
-- transaction began, so a job created in [since, until) whose id came within a minute of
-- its created_at has an id between them; the others (created_at set by hand, a long
-- transaction, a random id) are read off jobs_created_apart_idx, outside the bounds.
(SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, priority, total, progress, created_at, finished_at
FROM jobs
WHERE id < least(coalesce(:after::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'),
                 coalesce(job_id_bound(:until::timestamptz), 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
  AND (:since::timestamptz IS NULL OR id >= job_id_floor(:since))
  AND (:status::text IS NULL OR status = :status)
  AND (:type::text IS NULL OR type = :type)
  AND (:lane::uuid IS NULL OR lane = :lane)
  AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
  AND (:since::timestamptz IS NULL OR created_at >= :since)
  AND (:until::timestamptz IS NULL OR created_at < :until)
  AND (:error::text IS NULL OR last_error IS NOT NULL AND strpos(lower(last_error), lower(:error)) > 0)
  AND (:ids::uuid[] IS NULL OR id = ANY (:ids))
ORDER BY id DESC
LIMIT :limit)
UNION ALL
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
  AND (:status::text IS NULL OR status = :status)
  AND (:type::text IS NULL OR type = :type)
  AND (:lane::uuid IS NULL OR lane = :lane)
  AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
  AND (:since::timestamptz IS NULL OR created_at >= :since)
  AND (:until::timestamptz IS NULL OR created_at < :until)
  AND (:error::text IS NULL OR last_error IS NOT NULL AND strpos(lower(last_error), lower(:error)) > 0)
  AND (:ids::uuid[] IS NULL OR id = ANY (:ids))
ORDER BY id DESC
LIMIT :limit)
ORDER BY id DESC
LIMIT :limit
