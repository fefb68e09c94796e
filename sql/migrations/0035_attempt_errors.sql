-- Every failed attempt keeps its error, when, and which run and attempt it was (the last
-- 20, newest first), where last_error keeps only the last. Written by the statements
-- that fail a job (fail.sql, fail_stuck.sql); read only when one job is shown.
ALTER TABLE jobs ADD COLUMN errors jsonb NOT NULL DEFAULT '[]';

-- The first entry of `errors` for a failed attempt, and the list kept to its newest 20.
CREATE FUNCTION job_errors_with(errors jsonb, attempt integer, error text, run_id uuid) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
    FROM jsonb_array_elements(jsonb_build_array(jsonb_build_object(
             'attempt', attempt, 'error', error, 'runId', run_id, 'at', now()))
         || errors) WITH ORDINALITY AS x(e, n)
    WHERE n <= 20
$$;
