-- GET /jobs: newest first, one keyset page. Filters are optional ($1 status, $2 type,
-- $3 lane, $4 batch); the page starts strictly after the job $5 when given. Job ids grow
-- with creation time (migration 0026), so the primary key serves the page however deep
-- it is, in custom and generic plans alike: the bound is never NULL.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
  AND ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR type = $2)
  AND ($3::uuid IS NULL OR lane = $3)
  AND ($4::uuid IS NULL OR batch_id = $4)
ORDER BY id DESC
LIMIT $6
