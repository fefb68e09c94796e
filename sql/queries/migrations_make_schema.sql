-- The schema migrations_in_schema named, made if missing (one a DBA made beforehand needs
-- no CREATE on the database).
DO $$ BEGIN
    IF to_regnamespace(quote_ident(current_setting('skiplock.migrate_schema'))) IS NULL THEN
        EXECUTE format('CREATE SCHEMA %I', current_setting('skiplock.migrate_schema'));
    END IF;
END $$
