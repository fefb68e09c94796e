-- Whether jobs holds rows but no column statistics, and this role may gather them: a new
-- database after its first load, or one restored from a dump, before autovacuum's first
-- ANALYZE (up to a minute, longer when its workers are busy elsewhere). Without them the
-- claim's generic plan can probe each lane through an index other than jobs_claim_idx and sort the lane's
-- open jobs, so every claim grows with the backlog. The file's size, not a count: cheap
-- however large the table. pg_stats shows only what this role may read, and a role that
-- may not read jobs' statistics may not gather them either.
SELECT pg_has_role(c.relowner, 'USAGE')
       AND pg_relation_size(c.oid) > 0
       AND NOT EXISTS (SELECT 1 FROM pg_stats s
                       WHERE s.schemaname = n.nspname AND s.tablename = c.relname)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = 'jobs'::regclass
