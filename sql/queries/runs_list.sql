-- GET /runs: the invocation log, newest first, one keyset page over (started_at, id)
-- (a run's started_at is when its row was created). Optional filters: :stop_reason stop reason
-- ('running' for runs not finished), :trigger trigger. The page starts after (:at, :last_id).
SELECT id, trigger, stop_reason, jobs_done, jobs_failed, jobs_retried, jobs_deferred, quota_units, summary,
       error, started_at, finished_at
FROM runs
WHERE (started_at, id) < (coalesce(:at::timestamptz, 'infinity'),
                          coalesce(:last_id::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
  AND (:stop_reason::text IS NULL OR stop_reason = :stop_reason OR (:stop_reason = 'running' AND finished_at IS NULL))
  AND (:trigger::text IS NULL OR trigger = :trigger)
ORDER BY started_at DESC, id DESC
LIMIT :limit
