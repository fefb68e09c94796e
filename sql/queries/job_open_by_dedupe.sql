-- The open job holding dedupe key $1 in lane $2 (NULL: the default lane), the one
-- that made an enqueue a no-op, if it is still open.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE lane = coalesce($2::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND dedupe_key = $1 AND status IN ('pending', 'running')
