-- Jobs of type :type with a cancel request that no run will end: pending again (they went
-- back before their holder saw the request: a retry, a deferral), or running under a lease
-- (:lease_seconds seconds) that expired (the holder died). The stuck sweep cancels them.
-- Oldest request first, a bounded batch.
SELECT id FROM jobs
WHERE cancel_requested_at IS NOT NULL AND status IN ('pending', 'running') AND type = :type
  AND (status = 'pending' OR locked_at < now() - make_interval(secs => :lease_seconds))
ORDER BY cancel_requested_at
LIMIT 100
