-- The pipeline's 'jobs.settled' events are parked with the change and numbered in passes
-- (docs/events.md#numbering, docs/performance.md#settled-counts-in-passes).
--
-- A settling statement of a mixed batch of 25 touches up to 25 lanes, and one event per
-- lane per batch is about one event per job: numbering each (lock the room, move its
-- head, insert the event) took a fifth of the drain. Now a settling statement only
-- appends one row to settled_backlog, an unindexed table, holding its counts per lane and
-- type as arrays, in the same transaction as the change (a rolled-back change parks
-- nothing). A numbering pass takes what is parked (SKIP LOCKED: passes never share a
-- row), adds it up per lane and type, and writes one 'jobs.settled' per lane and type,
-- numbered as people's events are: a lane's event covers each batch it finished since its
-- last one (`batches` says how many). The batches whose jobs a statement moved are parked
-- the same way and told once a pass ('batch.progress' counts the batch's jobs: done in
-- every settling statement, it made a drain of one batch of 20,000 a third slower).
-- Passes run:
--   * every quarter second in a process where somebody follows a lane or a batch live (its
--     event hub, app/events/hub.py): a NOTIFY from each settling statement would make every
--     commit take NOTIFY's lock and wake every listener, hundreds of times a second;
--   * before every read of a room (GET /events, a WebSocket's catch-up);
--   * at a run's heartbeat (every 15 s) and at its end, pass after pass, for what nobody
--     asked for.
-- The pipeline never takes a room's row, so overlapping runs never wait for each other's
-- rooms. The old event backlog goes; what it held is carried over.

-- One row per settling statement: element k of each array is its k-th (lane, type). One
-- tuple, small enough to stay uncompressed in the row (25 lanes: about 1.4 kB), where a
-- row per lane was 25 tuples and a jsonb per lane went through compression.
CREATE TABLE settled_backlog (
    lanes     uuid[] NOT NULL,
    types     text[] NOT NULL,
    run_ids   uuid[] NOT NULL,
    done      integer[] NOT NULL,
    failed    integer[] NOT NULL,
    retrying  integer[] NOT NULL,
    deferred  integer[] NOT NULL,
    batch_ids uuid[] NOT NULL DEFAULT '{}',   -- the batches whose counts or progress moved
    at        timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

INSERT INTO settled_backlog (lanes, types, run_ids, done, failed, retrying, deferred, at)
SELECT ARRAY[(data->>'lane')::uuid], ARRAY[data->>'type'], ARRAY[(data->>'runId')::uuid],
       ARRAY[(data->>'done')::int], ARRAY[(data->>'failed')::int], ARRAY[(data->>'retrying')::int],
       ARRAY[(data->>'deferred')::int], at
FROM event_backlog
WHERE type = 'jobs.settled'
ORDER BY id;

-- One pass: up to 2,000 parked rows (a bounded statement; what is left waits for the next
-- pass), one event per lane and type, rooms locked in order by events_emit. How many
-- events it wrote. It never waits long: a room held past lock_timeout (a person's
-- transaction left open) makes the pass give up whole, its rows parked as they were, for
-- the next pass; a heartbeat or a reader that numbers first is never held up by it.
CREATE FUNCTION events_number_settled() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '200ms' AS $$
DECLARE
    rooms text[]; types text[]; data jsonb[]; moved uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM settled_backlog) THEN
        RETURN 0;
    END IF;
    BEGIN
        WITH taken AS (
            DELETE FROM settled_backlog b
            WHERE b.ctid = ANY (ARRAY(SELECT s.ctid FROM settled_backlog s LIMIT 2000 FOR UPDATE SKIP LOCKED))
            RETURNING b.*
        ), flat AS (
            SELECT u.*, t.at
            FROM taken t, unnest(t.lanes, t.types, t.run_ids, t.done, t.failed, t.retrying, t.deferred)
                              AS u(lane, type, run_id, done, failed, retrying, deferred)
        ), per_lane AS (
            SELECT lane, type, sum(done) AS done, sum(failed) AS failed, sum(retrying) AS retrying,
                   sum(deferred) AS deferred, count(*) AS batches,
                   array_agg(DISTINCT run_id) FILTER (WHERE run_id IS NOT NULL) AS runs,
                   min(at) AS since, max(at) AS until
            FROM flat GROUP BY lane, type
        )
        SELECT array_agg('lane:' || lane ORDER BY lane, type), array_agg('jobs.settled'::text),
               array_agg(jsonb_build_object('lane', lane, 'type', type, 'done', done, 'failed', failed,
                                            'retrying', retrying, 'deferred', deferred, 'batches', batches,
                                            'runIds', coalesce(runs, '{}'), 'since', since, 'until', until)
                         ORDER BY lane, type),
               (SELECT array_agg(DISTINCT b ORDER BY b) FROM taken t, unnest(t.batch_ids) AS b)
        INTO rooms, types, data, moved
        FROM per_lane;
        PERFORM events_emit(rooms, types, data);
        -- each batch moved: one 'batch.progress', counted from its jobs once a pass
        IF moved IS NOT NULL THEN
            PERFORM events_batch_progress(moved);
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    RETURN coalesce(cardinality(rooms), 0) + coalesce(cardinality(moved), 0);
END $$;
REVOKE EXECUTE ON FUNCTION events_number_settled() FROM PUBLIC;
-- a tenant's read numbers first: it writes only what the pipeline parked, nothing it is given
GRANT EXECUTE ON FUNCTION events_number_settled() TO skiplock_api;

-- A run folds the journal and numbers what is parked as it beats and when it ends: pass
-- after pass until nothing is left, for at most a second (one run draining one lane parks
-- 400 rows a second, 6,000 between two beats; a pass of 2,000 takes a few milliseconds).
CREATE OR REPLACE FUNCTION runs_fold_what_waits() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    PERFORM job_lanes_fold();
    WHILE events_number_settled() > 0 AND clock_timestamp() < started + interval '1 second' LOOP
    END LOOP;
    RETURN NULL;
END $$;

-- The jobs trigger of 0031: what settled is parked instead of numbered.
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
        WHERE settle AND o_status = 'running' AND n_status <> 'running'
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

DROP FUNCTION events_emit_or_park(text[], text[], jsonb[]);
DROP TABLE event_backlog;
