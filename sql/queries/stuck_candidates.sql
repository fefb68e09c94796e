-- Jobs of type :type whose lease (:lease_seconds seconds) expired on their last attempt (:max_attempts):
-- no claim will ever take them again. Oldest first, a bounded batch. From the type's floor of
-- running lock times, as the claim's look for expired leases (docs/shared-database.md): the
-- entries before it are jobs that ended, kept while a snapshot is held.
SELECT id FROM jobs
WHERE type = :type AND status = 'running'
  AND locked_at >= job_running_floor(:type)
  AND locked_at < now() - make_interval(secs => :lease_seconds)
  AND attempts >= :max_attempts
ORDER BY locked_at
LIMIT 100
