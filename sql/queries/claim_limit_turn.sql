-- Claims of a stage with a global_concurrency take turns, type by type: held until the
-- claiming transaction commits (app.engine.jobs._claim_within_limit).
SELECT pg_advisory_xact_lock(hashtext('skiplock.global_concurrency'), hashtext(:type))
