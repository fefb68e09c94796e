-- The queue lives in a schema of its own (DATABASE_SCHEMA, default skiplock), beside the
-- app's tables in public (docs/adopt.md#a-schema-of-its-own). migrate (app/engine/migrate.py)
-- makes the schema and runs every migration in it; a database whose queue is still in
-- public is first brought up to date there, then moved with relocate_from_public().

-- Move the named objects (tables, views, sequences, types, and every function of a name)
-- from public into `target`: the names every migration of the queue and the loaded
-- plug-ins creates, whatever exists of them. A table takes its indexes, constraints,
-- triggers, policies and owned sequences along.
CREATE FUNCTION relocate_from_public(names text[], target text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    moved integer := 0;
    obj record;
BEGIN
    FOR obj IN
        SELECT c.relname AS name, c.relkind AS kind FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY (names)
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i'))
    LOOP
        EXECUTE format(CASE obj.kind WHEN 'v' THEN 'ALTER VIEW public.%I SET SCHEMA %I'
                                     WHEN 'm' THEN 'ALTER MATERIALIZED VIEW public.%I SET SCHEMA %I'
                                     WHEN 'S' THEN 'ALTER SEQUENCE public.%I SET SCHEMA %I'
                                     ELSE 'ALTER TABLE public.%I SET SCHEMA %I' END, obj.name, target);
        moved := moved + 1;
    END LOOP;
    FOR obj IN
        SELECT t.typname AS name FROM pg_type t
        WHERE t.typnamespace = 'public'::regnamespace AND t.typname = ANY (names) AND t.typtype IN ('e', 'd')
    LOOP
        EXECUTE format('ALTER TYPE public.%I SET SCHEMA %I', obj.name, target);
        moved := moved + 1;
    END LOOP;
    FOR obj IN
        SELECT p.oid::regprocedure AS sig FROM pg_proc p
        WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY (names)
    LOOP
        EXECUTE format('ALTER ROUTINE %s SET SCHEMA %I', obj.sig, target);
        moved := moved + 1;
    END LOOP;
    -- the API role used public for the queue only
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_api') THEN
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM skiplock_api', 'public');
    END IF;
    RETURN moved;
END $$;

-- Every function of `names` in `target` looks up what it names in `target`, whoever calls
-- it (a plain INSERT from psql with its own search_path fires the queue's triggers), and
-- the API's roles may use the schema.
CREATE FUNCTION pin_to_schema(target text, names text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = quote_ident(target)::regnamespace AND p.prokind IN ('f', 'p')
               AND p.proname = ANY (names)
               AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c(setting)
                               WHERE c.setting = format('search_path=%I, pg_temp', target))
    LOOP
        EXECUTE format('ALTER ROUTINE %s SET search_path = %I, pg_temp', f, target);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_api') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO skiplock_api', target);
    END IF;
END $$;

REVOKE EXECUTE ON FUNCTION relocate_from_public(text[], text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pin_to_schema(text, text[]) FROM PUBLIC;
