-- Jobs with a cancel request that no run will end, of each type in :types (its lease,
-- :lease_seconds seconds, at the same place): pending again (they went back before their
-- holder saw the request: a retry, a deferral), or running under a lease that expired (the
-- holder died). The stuck sweep cancels them. Every stage in one statement, off the index of
-- the few open jobs with a request; of each type the oldest requests first, a bounded batch.
-- The leases come as text: an array type the driver knows without asking the server first.
SELECT j.type, j.id
FROM unnest(:types::text[], :lease_seconds::text[]) WITH ORDINALITY AS s(type, lease_seconds, n)
CROSS JOIN LATERAL (
    SELECT id, type, cancel_requested_at FROM jobs
    WHERE cancel_requested_at IS NOT NULL AND status IN ('pending', 'running') AND type = s.type
      AND (status = 'pending' OR locked_at < now() - make_interval(secs => s.lease_seconds::float8))
    ORDER BY cancel_requested_at
    LIMIT 100) j
ORDER BY s.n, j.cancel_requested_at
