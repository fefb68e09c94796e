-- Plans made for the values, until the transaction ends or plan_cache_mode_set.sql puts
-- back the mode returned (the pools' generic plans: app/engine/db.py). For GET /jobs: with
-- seven optional filters a generic plan expects about one row to match and sorts every
-- candidate; a plan that knows which filters are NULL walks the key.
SELECT current_setting('plan_cache_mode') AS was,
       set_config('plan_cache_mode', 'force_custom_plan', true) AS now
