-- Live and dead row versions of the queue's own tables, those named in :tables that exist in
-- the current schema (a name with no table is left out), from the statistics the server
-- keeps (estimates, as autovacuum reads them), and seconds since autovacuum last
-- vacuumed each (NULL: never since the statistics were reset).
SELECT relname::text AS table_name, n_live_tup AS live, n_dead_tup AS dead,
       extract(epoch FROM now() - last_autovacuum)::float8 AS autovacuum_seconds_ago
FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname = ANY (:tables::text[])
ORDER BY relname
