-- Jobs that wait for other jobs (docs/scheduling.md#jobs-that-wait-for-others), a handler's
-- result, and a batch's callback.
--
-- A job names its parents (jobs.parents) when it is enqueued. While any of them is open it
-- is 'waiting': a status the claim never looks at (claim.sql reads pending jobs only) and
-- the lane counters do not count as pending, so a job without parents is claimed exactly
-- as before. When its last parent ends done, one UPDATE makes it 'pending', through the
-- jobs triggers, which count it then. A parent that fails for good or is cancelled cancels
-- its waiting dependents (and theirs), or releases those that said run_anyway.
--
-- The release is a row trigger on the parent's ending, not a statement the run sends: a
-- job ends in many places (the run's finish-and-claim statement, a failure, the stuck
-- sweep, a person's cancel, plain SQL), and the trigger sees every one. Its WHEN reads a
-- flag on the parent row (has_dependents), so endings of jobs nobody waits for call
-- nothing.

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled', 'waiting'));

ALTER TABLE jobs
    ADD COLUMN parents uuid[],           -- the jobs this one waits for; fixed at enqueue
    ADD COLUMN parents_left integer,     -- how many of them have not ended yet
    ADD COLUMN run_anyway boolean NOT NULL DEFAULT false,  -- a parent that did not succeed releases it too
    ADD COLUMN has_dependents boolean,   -- some job names this one as a parent
    ADD COLUMN result jsonb;             -- what its handler returned (app/pipeline/results.py)

-- A parent's waiting dependents, found by its id. Only waiting jobs are in it.
CREATE INDEX jobs_waiting_parents_idx ON jobs USING gin (parents) WHERE status = 'waiting';

-- A waiting job is open: it holds its dedupe key as a pending one does. (The predicate is
-- still implied by the one every enqueue names, ON CONFLICT ... WHERE status IN ('pending',
-- 'running').)
DROP INDEX jobs_open_dedupe_uq;
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (lane, dedupe_key)
    WHERE status IN ('pending', 'running', 'waiting')
       OR (dedupe_key IS NOT NULL AND unique_for IS NOT NULL AND unique_released IS DISTINCT FROM finished_at);

-- Before a job with parents is inserted: every parent must be a job the enqueuer can see
-- (SECURITY INVOKER: row-level security hides another tenant's jobs, which are then as
-- unknown as made-up ids), and none may be the job itself. A job's parents all exist
-- before it and never change afterwards, so no cycle can form.
--
-- The parents are locked (FOR SHARE) before their status is read, so a parent ending at the
-- same moment either ended before (and counts now) or waits for this insert to commit and
-- then finds the new job waiting (its trigger's query runs after the lock is let go).
CREATE FUNCTION jobs_wait_for_parents() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
    found integer; still_open integer; lost integer; missing text;
BEGIN
    NEW.parents := ARRAY(SELECT DISTINCT p FROM unnest(NEW.parents) p WHERE p IS NOT NULL ORDER BY p);
    IF cardinality(NEW.parents) = 0 THEN
        NEW.parents := NULL;
        RETURN NEW;
    END IF;
    IF NEW.id = ANY (NEW.parents) THEN
        RAISE EXCEPTION 'job % cannot wait for itself', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_parents_acyclic';
    END IF;
    UPDATE jobs SET has_dependents = true WHERE id = ANY (NEW.parents) AND has_dependents IS NOT TRUE;
    SELECT count(*), count(*) FILTER (WHERE status NOT IN ('done', 'failed', 'cancelled')),
           count(*) FILTER (WHERE status IN ('failed', 'cancelled'))
    INTO found, still_open, lost
    FROM (SELECT status FROM jobs WHERE id = ANY (NEW.parents) ORDER BY id FOR SHARE) p;
    IF found < cardinality(NEW.parents) THEN
        missing := array_to_string(ARRAY(SELECT p FROM unnest(NEW.parents) p
                                         EXCEPT SELECT id FROM jobs WHERE id = ANY (NEW.parents)
                                         ORDER BY 1), ', ');
        RAISE EXCEPTION 'no such job to wait for: %', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_parents_known', DETAIL = missing;
    END IF;
    IF NEW.status <> 'pending' THEN  -- written as something else on purpose: left as it is
        NEW.parents_left := still_open;
    ELSIF lost > 0 AND NOT NEW.run_anyway THEN
        NEW.status := 'cancelled';
        NEW.finished_at := now();
        NEW.last_error := 'a job it waited for did not succeed';
        NEW.parents_left := still_open;
    ELSIF still_open > 0 THEN
        NEW.status := 'waiting';
        NEW.parents_left := still_open;
    ELSE
        NEW.parents_left := 0;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_wait_for_parents BEFORE INSERT ON jobs
    FOR EACH ROW WHEN (NEW.parents IS NOT NULL)
    EXECUTE FUNCTION jobs_wait_for_parents();

CREATE FUNCTION jobs_parents_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a job''s parents are fixed when it is enqueued'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_parents_acyclic';
END $$;
CREATE TRIGGER jobs_parents_fixed BEFORE UPDATE OF parents ON jobs
    FOR EACH ROW WHEN (OLD.parents IS DISTINCT FROM NEW.parents)
    EXECUTE FUNCTION jobs_parents_fixed();

-- A parent ended (or went away): its waiting dependents count it. Done, or not done and
-- they run anyway: one parent fewer to wait for, pending at the last (the decrement reads
-- the row it locked, so two parents ending at once never both leave it waiting). Failed,
-- cancelled or deleted: the others are cancelled, which ends them in turn. SECURITY
-- DEFINER: whoever ends a job (a run, a tenant's cancel) releases every job waiting for it.
CREATE FUNCTION jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    parent jobs;
    succeeded boolean;
BEGIN
    IF TG_OP = 'DELETE' THEN
        parent := OLD;
        succeeded := false;
    ELSE
        parent := NEW;
        succeeded := NEW.status = 'done';
    END IF;
    UPDATE jobs
    SET parents_left = parents_left - 1,
        status = CASE WHEN parents_left <= 1 THEN 'pending' ELSE 'waiting' END
    WHERE status = 'waiting' AND parents @> ARRAY[parent.id] AND (succeeded OR run_anyway);
    IF NOT succeeded THEN
        UPDATE jobs
        SET status = 'cancelled', finished_at = now(), parents_left = parents_left - 1,
            last_error = format('job %s it waited for ended %s', parent.id,
                                CASE WHEN TG_OP = 'DELETE' THEN 'deleted' ELSE parent.status END)
        WHERE status = 'waiting' AND parents @> ARRAY[parent.id] AND NOT run_anyway;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_release_dependents AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
                       AND NEW.status IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_release_dependents();
CREATE TRIGGER jobs_release_dependents_deleted AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.has_dependents AND OLD.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_release_dependents();

-- How many jobs wait in the caller's own lanes (0029, 0031): waiting ones too, so a tenant
-- cannot pile up jobs past TENANT_WAITING_JOBS_MAX behind a parent that never ends.
CREATE INDEX jobs_waiting_lane_idx ON jobs (lane) WHERE status = 'waiting';
CREATE OR REPLACE FUNCTION app_waiting_jobs() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT (SELECT coalesce(sum(c.pending), 0)::bigint
            FROM lanes l JOIN job_lane_counts c ON c.lane = l.id
            WHERE l.owner_id = (SELECT app_user_id()))
         + (SELECT count(*)
            FROM lanes l JOIN jobs j ON j.lane = l.id AND j.status = 'waiting'
            WHERE l.owner_id = (SELECT app_user_id()))
$$;

-- A released job wakes a waiting worker, as a retried one does.
DROP TRIGGER jobs_notify_retried ON jobs;
CREATE TRIGGER jobs_notify_retried AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IN ('failed', 'done', 'cancelled', 'waiting'))
    EXECUTE FUNCTION jobs_notify_insert();

-- A batch's callback: a job enqueued in the batch's lane when the batch ends (completed,
-- partially_failed, failed, stopped or cancelled), its payload the one given plus
-- {"batch": {"id", "status"}}. A batch leaves its open statuses once (every statement that
-- ends one repeats the "still open" test on the row it locked), and the dedupe key makes
-- a second insert a no-op besides.
ALTER TABLE batches ADD COLUMN callback_type text, ADD COLUMN callback_payload jsonb;

CREATE FUNCTION batches_enqueue_callback() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO jobs (type, lane, payload, dedupe_key)
    VALUES (NEW.callback_type, NEW.lane,
            coalesce(NEW.callback_payload, '{}') || jsonb_build_object('batch',
                jsonb_build_object('id', NEW.id, 'status', NEW.status)),
            'batch-callback:' || NEW.id)
    ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER enqueue_callback AFTER UPDATE OF status ON batches
    FOR EACH ROW WHEN (NEW.callback_type IS NOT NULL AND OLD.status IN ('pending', 'running')
                       AND NEW.status NOT IN ('pending', 'running'))
    EXECUTE FUNCTION batches_enqueue_callback();
