-- GET /jobs: newest first, one keyset page. Filters are optional (:status status, :type type,
-- :lane lane, :batch_id batch); the page starts strictly after the job :after when given. Job ids grow
-- with creation time (migration 0026), so the primary key serves the page however deep
-- it is, in custom and generic plans alike: the bound is never NULL.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE id < coalesce(:after::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
  AND (:status::text IS NULL OR status = :status)
  AND (:type::text IS NULL OR type = :type)
  AND (:lane::uuid IS NULL OR lane = :lane)
  AND (:batch_id::uuid IS NULL OR batch_id = :batch_id)
ORDER BY id DESC
LIMIT :limit
