-- Live events with less around them on the hot path (docs/performance.md#live-events).
--
-- Before this, every statement that changed jobs ran two statement triggers over its
-- rows: the lane counters', then the events' (pairing old and new rows again to count
-- what settled). The pipeline's events now come out of the counters' pass: one pairing,
-- one trigger call. The events trigger keeps what people do (retries, cancels), and runs
-- only when a person acts (its WHEN is evaluated before any call).
--
-- events_emit writes the same rows as before with less around them: the NOTIFY lines
-- come from the rooms' new heads (no second pass over the inserted events), built only
-- for rooms someone watches.
--
-- A database can turn live events off: ALTER DATABASE ... SET skiplock.events = off
-- (new sessions then write none; docs/events.md#turning-events-off).

CREATE FUNCTION events_on() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('skiplock.events', true), '') IS DISTINCT FROM 'off'
$$;

CREATE OR REPLACE FUNCTION events_emit(p_rooms text[], p_types text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    note text := '';
    line text;
    lines text[];
BEGIN
    IF p_rooms IS NULL OR cardinality(p_rooms) = 0 OR NOT events_on() THEN
        RETURN;
    END IF;
    -- n: events per room; heads: each room's head moved past them (rooms in order, so
    -- writers of the same rooms cannot deadlock); a room's k-th event of this call gets
    -- head - n + k.
    WITH n AS (
        SELECT r, count(*)::bigint AS c FROM unnest(p_rooms) AS r GROUP BY r
    ), heads AS (
        INSERT INTO event_rooms AS x (room, head_seq)
        SELECT r, c FROM n ORDER BY r
        ON CONFLICT (room) DO UPDATE SET head_seq = x.head_seq + excluded.head_seq
        RETURNING x.room, x.head_seq
    ), ins AS (
        INSERT INTO events (room, seq, type, data)
        SELECT e.r, h.head_seq - n.c + row_number() OVER (PARTITION BY e.r ORDER BY e.o), e.t, e.d
        FROM unnest(p_rooms, p_types, p_data) WITH ORDINALITY AS e(r, t, d, o)
        JOIN n ON n.r = e.r JOIN heads h ON h.room = e.r
    )
    SELECT array_agg(h.room || ' ' || (h.head_seq - n.c + 1) || ' ' || h.head_seq ORDER BY h.room) INTO lines
    FROM heads h JOIN n ON n.r = h.room
    WHERE EXISTS (SELECT 1 FROM event_watch w WHERE w.room = h.room);
    IF lines IS NULL THEN
        RETURN;
    END IF;
    FOREACH line IN ARRAY lines LOOP
        -- a NOTIFY payload holds under 8000 bytes: long lists go in several
        IF length(note) + length(line) > 7000 THEN
            PERFORM pg_notify('skiplock_events', note);
            note := '';
        END IF;
        note := note || CASE WHEN note = '' THEN '' ELSE E'\n' END || line;
    END LOOP;
    PERFORM pg_notify('skiplock_events', note);
END $$;

-- The lane counters (as in 0013) and, in the same pass, the pipeline's events: one
-- 'jobs.settled' per (lane, type) and statement for the jobs that stopped running, into
-- the lane's room: {lane, type, runId, done, failed, retrying, deferred}; and
-- 'batch.progress' for the batches whose jobs changed (a person's statements too). What
-- else people do is left to the events trigger below.
CREATE OR REPLACE FUNCTION jobs_lanes_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_pending integer[]; a_served integer[];
    a_in_head timestamptz[]; a_in_ready timestamptz[]; a_out_head timestamptz[]; a_out_ready timestamptz[];
    a_may_create boolean;
    s_room text[]; s_type text[]; s_data jsonb[];
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
                    ELSE 0 END AS served
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
    ), told AS (
        SELECT array_agg('lane:' || lane ORDER BY lane, type) AS s_room,
               array_agg('jobs.settled'::text) AS s_type,
               array_agg(jsonb_build_object('lane', lane, 'type', type, 'runId', run_id, 'done', done,
                                            'failed', failed, 'retrying', retrying, 'deferred', deferred)
                         ORDER BY lane, type) AS s_data
        FROM settled
    )
    SELECT c.a_type, c.a_lane, c.a_p, c.a_s, c.a_ih, c.a_ir, c.a_oh, c.a_orr, c.a_may_create,
           t.s_room, t.s_type, t.s_data
    INTO a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready, a_out_head, a_out_ready,
         a_may_create, s_room, s_type, s_data
    FROM counters c, told t;
    IF a_type IS NOT NULL THEN  -- else nothing the counters track changed (e.g. progress)
        PERFORM job_lanes_apply(a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready,
                                a_out_head, a_out_ready, a_may_create);
        INSERT INTO job_lane_hours AS h (type, lane, hour, served)
        SELECT c.type, c.lane, date_trunc('hour', now()), c.n
        FROM unnest(a_type, a_lane, a_served) AS c(type, lane, n)
        WHERE c.n <> 0
        ORDER BY c.type, c.lane
        ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served;
    END IF;
    IF s_room IS NOT NULL THEN
        PERFORM events_emit(s_room, s_type, s_data);
    END IF;
    -- batches whose jobs changed: told for the pipeline's settling statements (a claim
    -- alone changes no batch's counts) and for whatever a person does
    IF (settle OR (person AND events_on())) AND EXISTS (SELECT 1 FROM new_jobs WHERE batch_id IS NOT NULL) THEN
        PERFORM events_batch_progress(ARRAY(
            SELECT DISTINCT n.batch_id FROM old_jobs o JOIN new_jobs n ON n.id = o.id
            WHERE n.batch_id IS NOT NULL
              AND (n.status <> o.status OR n.progress IS DISTINCT FROM o.progress
                   OR n.total IS DISTINCT FROM o.total)
            ORDER BY 1));
    END IF;
    RETURN NULL;
END $$;

-- What people do to jobs: 'jobs.retried' (failed back to pending) and 'jobs.cancelled'
-- (pending to failed); the batches they touched are told by the counters' pass. The pipeline's own
-- statements never get here (the WHEN), their events come from the counters' pass.
CREATE OR REPLACE FUNCTION jobs_events_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM events_person_jobs('jobs.retried',
        (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
         FROM old_jobs o JOIN new_jobs n ON n.id = o.id
         WHERE o.status = 'failed' AND n.status = 'pending'));
    PERFORM events_person_jobs('jobs.cancelled',
        (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
         FROM old_jobs o JOIN new_jobs n ON n.id = o.id
         WHERE o.status = 'pending' AND n.status = 'failed'));
    RETURN NULL;
END $$;
DROP TRIGGER events_update ON jobs;
CREATE TRIGGER events_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT
    WHEN (events_by_person())
    EXECUTE FUNCTION jobs_events_after_update();
