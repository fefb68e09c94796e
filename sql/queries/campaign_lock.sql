-- Serialise batch requests for one campaign (released at transaction end), so the
-- "which types are already in flight" check and the insert cannot race.
SELECT pg_advisory_xact_lock(hashtext('skiplock.campaign'), hashtext($1::uuid::text))
