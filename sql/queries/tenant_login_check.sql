-- What the session's own login may do beyond the role skiplock_api: each reason, in
-- words, why it may not serve tenant requests (none: it is fit). A tenant's request can
-- always RESET ROLE back to this login, so the login must be no more than the API role.
-- The queue's tables are found through the catalog in the schema the URL names (the
-- first of its search_path): a login without the API role may not even use the schema.
WITH queue AS (
    SELECT c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = 'jobs'
      AND n.nspname = trim(both '"' FROM trim(split_part(current_setting('search_path'), ',', 1)))
)
SELECT array_remove(ARRAY[
    CASE WHEN r.rolsuper THEN 'is a superuser' END,
    CASE WHEN r.rolbypassrls THEN 'bypasses row-level security' END,
    CASE WHEN r.rolcreaterole THEN 'may create roles' END,
    CASE WHEN pg_has_role(r.oid, 'skiplock_admin', 'MEMBER') THEN 'is a member of skiplock_admin' END,
    CASE WHEN pg_has_role(r.oid, q.relowner, 'MEMBER') THEN 'owns the tables' END,
    CASE WHEN NOT pg_has_role(r.oid, 'skiplock_api', 'MEMBER') THEN 'is not a member of skiplock_api' END,
    CASE WHEN q.relowner IS NULL THEN 'finds no queue in the schema its URL names' END
], NULL) AS reasons
FROM pg_roles r LEFT JOIN queue q ON true
WHERE r.rolname = session_user
