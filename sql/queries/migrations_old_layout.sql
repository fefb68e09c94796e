-- Whether the queue of this database is still in public while :schema has none of it yet.
SELECT :schema::text <> 'public' AND to_regclass('public.schema_migrations') IS NOT NULL
       AND to_regclass(format('%I.schema_migrations', :schema::text)) IS NULL
