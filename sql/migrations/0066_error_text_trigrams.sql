-- GET /jobs?error=: a text found in few errors is found off a trigram index of the errors
-- (pg_trgm), not by reading every job with an error newer than the matches.
--
-- Row-level security keeps the index from the list itself: ILIKE is not leakproof, so under
-- a policy the planner may not look it up in an index before the policy has passed the row.
-- An admin's list (app/engine/job_admin.py) first asks app_error_matches for the jobs whose
-- error holds the text, up to a cap; when there are no more than that, the page reads
-- those jobs by id, under the policy as ever. More than the cap is a common text, and the
-- page walks the errors newest first (jobs_error_idx), where matches come soon. A tenant's
-- list walks its own lanes' errors as before (jobs_error_lane_idx).
--
-- pg_trgm is a trusted extension: a role with CREATE on the database may add it. Where it
-- is missing or may not be added, everything works the same without the index (a rare text
-- reads every error, as before), and docs/deploy.md says how to add it later. The
-- extension goes where the connection's search_path puts it unless the database has it
-- already; the index names its operator class in the extension's schema either way.

-- What `text` means inside a LIKE pattern, taken literally: its %, _ and \ escaped.
CREATE FUNCTION contains_pattern(text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '%' || replace(replace(replace($1, '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;

DO $$
DECLARE
    ops_schema name;
BEGIN
    SELECT n.nspname INTO ops_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
    IF ops_schema IS NULL THEN
        BEGIN
            CREATE EXTENSION pg_trgm;
        EXCEPTION WHEN insufficient_privilege OR undefined_file OR feature_not_supported THEN
            RAISE NOTICE 'pg_trgm could not be added (%); GET /jobs?error= reads without its index', SQLERRM;
            RETURN;
        END;
        SELECT n.nspname INTO ops_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    END IF;
    EXECUTE format('CREATE INDEX jobs_error_text_idx ON jobs USING gin (last_error %I.gin_trgm_ops) '
                   'WHERE last_error IS NOT NULL', ops_schema);
END $$;

-- The jobs whose error holds `text` (any case), at most `cap` of them, in no order; for an
-- admin's list only. SECURITY DEFINER: read without the row-level policy, so the trigram
-- index serves it. EXECUTE plans the lookup for the text given (a pattern the planner can
-- see is one it can look up); the statement itself is fixed.
CREATE FUNCTION app_error_matches(text, integer) RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT id FROM jobs WHERE last_error IS NOT NULL AND last_error ILIKE contains_pattern($1) LIMIT $2'
        USING $1, $2;
END $$;
REVOKE EXECUTE ON FUNCTION app_error_matches(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_error_matches(text, integer) TO skiplock_admin;
