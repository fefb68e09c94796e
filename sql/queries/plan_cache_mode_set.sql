-- plan_cache_mode back to :mode (what plan_for_values.sql returned), until the transaction ends.
SELECT set_config('plan_cache_mode', :mode, true)
