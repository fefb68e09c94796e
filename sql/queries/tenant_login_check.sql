-- What the session's own login may do beyond the role skiplock_api: each reason, in
-- words, why it may not serve tenant requests (none: it is fit). A tenant's request can
-- always RESET ROLE back to this login, so the login must be no more than the API role.
SELECT array_remove(ARRAY[
    CASE WHEN r.rolsuper THEN 'is a superuser' END,
    CASE WHEN r.rolbypassrls THEN 'bypasses row-level security' END,
    CASE WHEN r.rolcreaterole THEN 'may create roles' END,
    CASE WHEN pg_has_role(r.oid, 'skiplock_admin', 'MEMBER') THEN 'is a member of skiplock_admin' END,
    CASE WHEN pg_has_role(r.oid, t.relowner, 'MEMBER') THEN 'owns the tables' END,
    CASE WHEN NOT pg_has_role(r.oid, 'skiplock_api', 'MEMBER') THEN 'is not a member of skiplock_api' END
], NULL) AS reasons
FROM pg_roles r, pg_class t
WHERE r.rolname = session_user AND t.oid = 'jobs'::regclass
