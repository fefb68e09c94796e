-- GET /jobs: newest first, one keyset page. Filters are optional ($1 status, $2 type,
-- $3 lane, $4 batch); the page starts strictly after the keyset ($5, $6) when given.
-- The keyset is compared as one row value that is never NULL, so the index on
-- (created_at, id) serves the page however deep it is, in custom and generic plans alike.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE (created_at, id) < (coalesce($5::timestamptz, 'infinity'),
                          coalesce($6::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
  AND ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR type = $2)
  AND ($3::uuid IS NULL OR lane = $3)
  AND ($4::uuid IS NULL OR batch_id = $4)
ORDER BY created_at DESC, id DESC
LIMIT $7
