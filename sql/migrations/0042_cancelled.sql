-- A cancel is an ending of its own: status 'cancelled' (docs/queue.md#words), where it was
-- 'failed' with the error 'cancelled'. "failed" keeps one meaning: the job ended failed.
-- A running job can be cancelled too: the request is kept on the job (cancel_requested_at)
-- and the run holding it ends it (app/pipeline/cancel_watch.py); a batch with a cancelled
-- job ends 'stopped'.

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled'));

ALTER TABLE batches DROP CONSTRAINT batches_status_check;
ALTER TABLE batches ADD CONSTRAINT batches_status_check
    CHECK (status IN ('pending', 'running', 'completed', 'partially_failed', 'failed', 'stopped', 'cancelled'));

-- When a person asked to cancel the job while it was open; the job ends cancelled as soon
-- as its holder (or, for a holder that died, the stuck sweep) sees it.
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;

-- The cancel watch's look-up by run, once a second per run: only open jobs with a request
-- are in it, so it stays a handful of entries however busy the queue is.
CREATE INDEX jobs_cancel_requested_idx ON jobs (run_id)
    WHERE cancel_requested_at IS NOT NULL AND status IN ('pending', 'running');

UPDATE jobs SET status = 'cancelled'
WHERE status = 'failed' AND last_error IN ('cancelled', 'cancelled with its batch');

-- Batches that ended with cancelled children: stopped, as reconcile_batches.sql now says.
UPDATE batches b SET status = 'stopped'
WHERE b.status IN ('failed', 'partially_failed')
  AND EXISTS (SELECT 1 FROM jobs j WHERE j.batch_id = b.id AND j.status = 'cancelled');

-- Finished jobs, for pruning and the last day's counts: cancelled ones too.
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE status IN ('done', 'failed', 'cancelled');

-- A cancelled job made pending again (a retry) wakes a waiting worker, as a failed one does.
DROP TRIGGER jobs_notify_retried ON jobs;
CREATE TRIGGER jobs_notify_retried AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IN ('failed', 'done', 'cancelled'))
    EXECUTE FUNCTION jobs_notify_insert();

-- What people do to jobs: 'jobs.retried' (failed or cancelled back to pending) and
-- 'jobs.cancelled' (pending to cancelled). A running job's cancel ends in the run that
-- holds it, a pipeline statement: the jobs.settled counts leave it out (below).
CREATE OR REPLACE FUNCTION jobs_events_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM events_person_jobs('jobs.retried',
        (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
         FROM old_jobs o JOIN new_jobs n ON n.id = o.id
         WHERE o.status IN ('failed', 'cancelled') AND n.status = 'pending'));
    PERFORM events_person_jobs('jobs.cancelled',
        (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
         FROM old_jobs o JOIN new_jobs n ON n.id = o.id
         WHERE o.status = 'pending' AND n.status = 'cancelled'));
    RETURN NULL;
END $$;

-- The jobs trigger of 0032, with one change: a running job the pipeline ends cancelled is
-- no lane's settled work (done, failed, retrying, deferred), so it parks no empty count.
-- Pending counts need nothing new: a cancelled job is not pending.
CREATE OR REPLACE FUNCTION jobs_lanes_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_pending integer[]; a_served integer[];
    a_in_head timestamptz[]; a_in_ready timestamptz[]; a_out_head timestamptz[]; a_out_ready timestamptz[];
    a_may_create boolean; moved_batches uuid[];
    person boolean := events_by_person();
    -- the pipeline's statements (nobody named) with jobs that were running: settled work
    settle boolean := NOT person AND events_on()
                      AND EXISTS (SELECT 1 FROM old_jobs WHERE status = 'running');
BEGIN
    -- The pipeline's statements where nothing was or becomes pending, no attempt starts
    -- and nothing settles: nothing to count or to tell. (A person's always go on: their
    -- batches' progress is told below.)
    IF NOT settle AND NOT person AND NOT EXISTS (SELECT 1 FROM old_jobs WHERE status = 'pending')
       AND NOT EXISTS (SELECT 1 FROM new_jobs WHERE status IN ('pending', 'running')) THEN
        RETURN NULL;
    END IF;
    WITH pair AS (  -- each row's old and new version (a job's id never changes)
        SELECT o.type AS o_type, o.lane AS o_lane, o.created_at AS o_created, o.run_after AS o_run_after,
               n.type, n.lane, n.created_at, n.run_after, o.run_id AS o_run_id,
               o.status AS o_status, n.status AS n_status, o.attempts AS o_attempts, n.attempts,
               o.status = 'pending' AS was_pending, n.status = 'pending' AS is_pending,
               (o.type, o.lane, o.created_at, o.run_after)
                   IS DISTINCT FROM (n.type, n.lane, n.created_at, n.run_after) AS moved,
               -- an attempt starts (claim or reclaim): served; a deferral hands it back
               CASE WHEN n.status = 'running' AND (o.status <> 'running' OR n.attempts > o.attempts) THEN 1
                    WHEN o.status = 'running' AND n.status = 'pending' AND n.attempts < o.attempts THEN -1
                    ELSE 0 END AS served,
               n.batch_id,
               (n.status <> o.status OR n.progress IS DISTINCT FROM o.progress
                OR n.total IS DISTINCT FROM o.total) AS batch_moved
        FROM old_jobs o JOIN new_jobs n ON n.id = o.id
    ), d AS (
        -- a pending row that leaves or changes leaves the lane's queue; its new version joins
        SELECT o_type AS type, o_lane AS lane, -1 AS p, 0 AS s, NULL::timestamptz AS ih,
               NULL::timestamptz AS ir, o_created AS oh, o_run_after AS orr
        FROM pair WHERE was_pending AND (NOT is_pending OR moved)
        UNION ALL
        SELECT type, lane, 1, 0, created_at, run_after, NULL, NULL
        FROM pair WHERE is_pending AND (NOT was_pending OR moved)
        UNION ALL
        SELECT type, lane, 0, served, NULL, NULL, NULL, NULL
        FROM pair WHERE served <> 0
    ), per_lane AS (
        SELECT type, lane, sum(p)::int AS p, sum(s)::int AS s, min(ih) AS ih, min(ir) AS ir,
               min(oh) AS oh, min(orr) AS orr
        FROM d GROUP BY type, lane
    ), settled AS (
        SELECT lane, type, min(o_run_id::text) AS run_id,
               count(*) FILTER (WHERE n_status = 'done') AS done,
               count(*) FILTER (WHERE n_status = 'failed') AS failed,
               count(*) FILTER (WHERE n_status = 'pending' AND attempts >= o_attempts) AS retrying,
               count(*) FILTER (WHERE n_status = 'pending' AND attempts < o_attempts) AS deferred
        FROM pair
        WHERE settle AND o_status = 'running' AND n_status IN ('done', 'failed', 'pending')
        GROUP BY lane, type
    ), counters AS (
        SELECT array_agg(type) AS a_type, array_agg(lane) AS a_lane, array_agg(p) AS a_p,
               array_agg(s) AS a_s, array_agg(ih) AS a_ih, array_agg(ir) AS a_ir,
               array_agg(oh) AS a_oh, array_agg(orr) AS a_orr,
               bool_or(ih IS NOT NULL OR (s > 0 AND oh IS NULL)) AS a_may_create
        FROM (SELECT * FROM per_lane ORDER BY type, lane) sorted
    ), batches_moved AS (
        -- the batches whose counts or progress this statement changed (sorted: DISTINCT)
        SELECT coalesce(array_agg(DISTINCT batch_id), '{}') AS ids
        FROM pair WHERE (settle OR person) AND batch_id IS NOT NULL AND batch_moved
    ), parked AS (
        -- what the pipeline settled, parked with the change: one row, a (lane, type) per
        -- element, and the batches moved
        INSERT INTO settled_backlog (lanes, types, run_ids, done, failed, retrying, deferred, batch_ids)
        SELECT coalesce(array_agg(lane), '{}'), coalesce(array_agg(type), '{}'),
               coalesce(array_agg(run_id::uuid), '{}'), coalesce(array_agg(done::int), '{}'),
               coalesce(array_agg(failed::int), '{}'), coalesce(array_agg(retrying::int), '{}'),
               coalesce(array_agg(deferred::int), '{}'), (SELECT ids FROM batches_moved)
        FROM settled
        HAVING settle AND (count(*) > 0 OR cardinality((SELECT ids FROM batches_moved)) > 0)
        RETURNING 1
    )
    SELECT c.a_type, c.a_lane, c.a_p, c.a_s, c.a_ih, c.a_ir, c.a_oh, c.a_orr, c.a_may_create, b.ids
    INTO a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready, a_out_head, a_out_ready,
         a_may_create, moved_batches
    FROM counters c, batches_moved b;
    IF a_type IS NOT NULL THEN  -- else nothing the counters track changed (e.g. progress)
        PERFORM job_lanes_count(a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready,
                                a_out_head, a_out_ready, a_may_create);
    END IF;
    -- batches whose jobs a person changed: told at once (the pipeline's are parked above:
    -- counting a batch's jobs in every settling statement cost a drain of one batch of
    -- 20,000 a third of its speed)
    IF person AND events_on() AND cardinality(moved_batches) > 0 THEN
        PERFORM events_batch_progress(moved_batches);
    END IF;
    RETURN NULL;
END $$;
