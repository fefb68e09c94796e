-- Jobs of type $1 whose lease ($2 seconds) expired on their last attempt ($3):
-- no claim will ever take them again. Oldest first, a bounded batch.
SELECT id FROM jobs
WHERE type = $1 AND status = 'running'
  AND locked_at < now() - make_interval(secs => $2)
  AND attempts >= $3
ORDER BY locked_at
LIMIT 100
