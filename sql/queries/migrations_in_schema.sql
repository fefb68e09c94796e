-- This transaction's migrations go to :schema: made if missing, first on the search_path.
SELECT set_config('skiplock.migrate_schema', :schema::text, true),
       set_config('search_path', format('%I', :schema::text), true)
