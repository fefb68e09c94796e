-- No BEFORE UPDATE row trigger on jobs. With any, PostgreSQL fetches and locks the old row
-- of every updated row before it tests the trigger's WHEN: every claim and every ending paid
-- for the two below (1-4 µs a job) though neither ever fires on them.
--
-- A job going back to pending after it ended (a retry) takes its dedupe key again, and an
-- ended job holding the key whose window is over must let it go first (0041). The statements
-- that reopen a job (job_retry.sql, jobs_retry_failed.sql) call jobs_let_go_of_keys before
-- they update, and a plain-SQL reopen can call it the same way; without it, the unique index
-- refuses the reopen as it refuses one inside the window. SECURITY DEFINER, as the trigger
-- was: a tenant's retry lets go of its own lane's key whatever the role may update, and it
-- only lets go of windows that are over, which no enqueue or retry would meet anyway.
DROP TRIGGER jobs_let_go_of_key_reopen ON jobs;

CREATE FUNCTION jobs_let_go_of_keys(takers uuid[]) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH let_go AS (
        UPDATE jobs o SET unique_released = o.finished_at
        FROM jobs t
        WHERE t.id = ANY (takers) AND t.dedupe_key IS NOT NULL
          AND o.lane = t.lane AND o.dedupe_key = t.dedupe_key AND o.id <> ALL (takers)
          AND o.status NOT IN ('pending', 'running')
          AND o.unique_for IS NOT NULL AND o.unique_released IS DISTINCT FROM o.finished_at
          AND o.finished_at + o.unique_for <= now()
        RETURNING o.id)
    SELECT count(*)::integer FROM let_go
$$;

-- A job's parents stay fixed: refused after the row is written, which an update of any
-- other column never asks about (the trigger is on the column).
DROP TRIGGER jobs_parents_fixed ON jobs;
CREATE TRIGGER jobs_parents_fixed AFTER UPDATE OF parents ON jobs
    FOR EACH ROW WHEN (OLD.parents IS DISTINCT FROM NEW.parents)
    EXECUTE FUNCTION jobs_parents_fixed();
