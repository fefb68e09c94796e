-- `make run`'s tenant login (TENANT_DATABASE_URL): a login that is a member of
-- skiplock_api and of nothing else, made once; its password comes in the session setting
-- skiplock.local_password (ALTER ROLE takes no parameters) and is set again each start,
-- so the one kept in the data folder is always the one that works.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_tenant') THEN
        CREATE ROLE skiplock_tenant LOGIN IN ROLE skiplock_api;
    END IF;
    EXECUTE format('ALTER ROLE skiplock_tenant PASSWORD %L', current_setting('skiplock.local_password'));
END $$
