-- Serialise batch requests for one lane (released at transaction end), so the "which
-- types are already in flight" check and the insert cannot race.
SELECT pg_advisory_xact_lock(hashtext('skiplock.lane'), hashtext(:lane::uuid::text))
