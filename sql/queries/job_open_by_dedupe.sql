-- The open job holding dedupe key :dedupe_key in lane :lane (NULL: the default lane), the one
-- that made an enqueue a no-op, if it is still open.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, lane, total, progress, created_at, finished_at
FROM jobs
WHERE lane = coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND dedupe_key = :dedupe_key AND status IN ('pending', 'running')
