-- GET /runs: the invocation log, newest first, one keyset page over (started_at, id)
-- (a run's started_at is when its row was created). Optional filters: $1 stop reason
-- ('running' for runs not finished), $2 trigger. The page starts after ($3, $4).
SELECT id, trigger, stop_reason, jobs_done, jobs_failed, jobs_retried, jobs_deferred, quota_units, summary,
       error, started_at, finished_at
FROM runs
WHERE (started_at, id) < (coalesce($3::timestamptz, 'infinity'),
                          coalesce($4::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
  AND ($1::text IS NULL OR stop_reason = $1 OR ($1 = 'running' AND finished_at IS NULL))
  AND ($2::text IS NULL OR trigger = $2)
ORDER BY started_at DESC, id DESC
LIMIT $5
