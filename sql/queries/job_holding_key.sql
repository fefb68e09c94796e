-- The job holding dedupe key :dedupe_key in lane :lane (NULL: the default lane), the one that
-- made an enqueue a no-op or a retry a conflict: an open job, or one that ended less than
-- its unique_for ago. No row once the key is free.
SELECT id
FROM jobs
WHERE lane = coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND dedupe_key = :dedupe_key
  AND (status IN ('pending', 'running', 'waiting')
       OR (unique_for IS NOT NULL AND unique_released IS DISTINCT FROM finished_at
           AND finished_at + unique_for > now()))
