-- Claims of a stage with limits across every run (global_concurrency, rate) take turns,
-- type by type: held until the claiming transaction commits (app/engine/claim_limits.py).
SELECT pg_advisory_xact_lock(hashtext('skiplock.claim_limit'), hashtext(:type))
