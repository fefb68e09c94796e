-- Live events: what changed, per room, in the transaction that changed it.
--
-- A room is a text key: 'account:<user id>', 'lane:<lane id>', 'batch:<batch id>' or
-- 'system' (admins only). Each room numbers its events 1, 2, 3 ... (seq). The number is
-- taken from the room's row in event_rooms, updated in the same transaction as the
-- event: the row lock serialises the writers of one room (only), so a room's events
-- commit in seq order and a rolled-back writer leaves no hole. A reader that has seen
-- seq N never misses N+1 by reading too early.
--
-- Triggers write the events, so every writer (the API, the CLI, the pipeline, psql) is
-- covered; after commit a NOTIFY on 'skiplock_events' says which watched rooms (see
-- event_watch) got which seqs ("<room> <first> <last>" lines), and app/events/ fans them
-- out to WebSockets.
-- Retention is a rule applied when reading (only the last EVENTS_REPLAY of a room are
-- replayed, older asks get a gap), and maintenance prunes what is past it.

CREATE TABLE event_rooms (
    room      text PRIMARY KEY,
    head_seq  bigint NOT NULL DEFAULT 0     -- the room's last seq
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

CREATE TABLE events (
    room  text NOT NULL,
    seq   bigint NOT NULL,
    type  text NOT NULL,
    data  jsonb NOT NULL DEFAULT '{}',
    at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (room, seq)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- The rooms someone follows live right now: each serving process's listener registers
-- the rooms its WebSockets follow (listener: that LISTEN connection's backend pid). Only
-- writes to these rooms NOTIFY, so the pipeline's commits take NOTIFY's commit-time lock
-- only while somebody watches their lanes (docs/performance.md#live-events).
CREATE TABLE event_watch (
    room      text NOT NULL,
    listener  integer NOT NULL,
    PRIMARY KEY (room, listener)
);

-- Append events: one per element, in order (a room's several events of one call get
-- consecutive seqs). Rooms are locked in room order, so two writers of the same rooms
-- cannot deadlock within one call. Called by the triggers below only.
CREATE FUNCTION events_emit(p_rooms text[], p_types text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    note text := '';
    line text;
    lines text[];
BEGIN
    IF p_rooms IS NULL OR cardinality(p_rooms) = 0 THEN
        RETURN;
    END IF;
    WITH e AS (
        SELECT r, t, d, row_number() OVER (PARTITION BY r ORDER BY o) AS k
        FROM unnest(p_rooms, p_types, p_data) WITH ORDINALITY AS e(r, t, d, o)
    ), n AS (
        SELECT r, count(*) AS c FROM e GROUP BY r
    ), heads AS (
        INSERT INTO event_rooms AS x (room, head_seq)
        SELECT r, c FROM n ORDER BY r
        ON CONFLICT (room) DO UPDATE SET head_seq = x.head_seq + excluded.head_seq
        RETURNING x.room, x.head_seq
    ), ins AS (
        INSERT INTO events (room, seq, type, data)
        SELECT e.r, h.head_seq - n.c + e.k, e.t, e.d
        FROM e JOIN n ON n.r = e.r JOIN heads h ON h.room = e.r
        RETURNING room, seq
    )
    SELECT array_agg(room || ' ' || first || ' ' || last ORDER BY room) INTO lines
    FROM (SELECT room, min(seq) AS first, max(seq) AS last FROM ins GROUP BY room) r
    WHERE room IN (SELECT w.room FROM event_watch w);
    FOREACH line IN ARRAY coalesce(lines, '{}') LOOP
        -- a NOTIFY payload holds under 8000 bytes: long lists go in several
        IF length(note) + length(line) > 7000 THEN
            PERFORM pg_notify('skiplock_events', note);
            note := '';
        END IF;
        note := note || CASE WHEN note = '' THEN '' ELSE E'\n' END || line;
    END LOOP;
    IF note <> '' THEN
        PERFORM pg_notify('skiplock_events', note);
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION events_emit(text[], text[], jsonb[]) FROM PUBLIC;

-- Whether the transaction acts for a person (the API, the CLI, psql naming an actor):
-- the pipeline's claims and completions name nobody, or 'pipeline'.
CREATE FUNCTION events_by_person() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('app.current_actor_kind', true), '') NOT IN ('', 'pipeline')
        OR coalesce(current_setting('app.current_key_prefix', true), '') <> ''
$$;

-- What people do to jobs, one event per (lane, type) and statement, into the lane's
-- room, its owner's account room and 'system': {lane, type, count, ids (the first 50)}.
CREATE FUNCTION events_person_jobs(p_type text, p_rows jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_room text[]; a_type text[]; a_data jsonb[];
BEGIN
    WITH g AS (
        SELECT r->>'lane' AS lane, r->>'type' AS type, count(*) AS n,
               (array_agg(r->>'id' ORDER BY r->>'id'))[1:50] AS ids
        FROM jsonb_array_elements(p_rows) AS r GROUP BY 1, 2
    ), d AS (
        SELECT g.lane, l.owner_id,
               jsonb_build_object('lane', g.lane, 'type', g.type, 'count', g.n, 'ids', to_jsonb(g.ids)) AS data
        FROM g LEFT JOIN lanes l ON l.id = g.lane::uuid
    ), rooms AS (
        SELECT 'lane:' || lane AS room, data FROM d
        UNION ALL SELECT 'account:' || owner_id, data FROM d WHERE owner_id IS NOT NULL
        UNION ALL SELECT 'system', data FROM d
    )
    SELECT array_agg(room), array_agg(p_type), array_agg(data) INTO a_room, a_type, a_data FROM rooms;
    PERFORM events_emit(a_room, a_type, a_data);
END $$;
REVOKE EXECUTE ON FUNCTION events_person_jobs(text, jsonb) FROM PUBLIC;

-- A batch's progress, from its jobs (as GET /batches/{id} counts it), into its room.
CREATE FUNCTION events_batch_progress(p_batches uuid[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_room text[]; a_type text[]; a_data jsonb[];
BEGIN
    SELECT array_agg('batch:' || b.id ORDER BY b.id), array_agg('batch.progress'::text),
           array_agg(jsonb_build_object('batch', b.id, 'jobs', c.jobs, 'done', c.done, 'failed', c.failed,
                                        'total', c.total, 'progress', c.progress) ORDER BY b.id)
    INTO a_room, a_type, a_data
    FROM unnest(p_batches) AS b(id)
    CROSS JOIN LATERAL (
        SELECT count(*) AS jobs,
               count(*) FILTER (WHERE j.status = 'done') AS done,
               count(*) FILTER (WHERE j.status = 'failed') AS failed,
               sum(j.total) AS total,
               sum(CASE WHEN j.status = 'done' THEN coalesce(j.progress, j.total, 0)
                        ELSE coalesce(j.progress, 0) END) AS progress
        FROM jobs j WHERE j.batch_id = b.id
    ) c;
    PERFORM events_emit(a_room, a_type, a_data);
END $$;
REVOKE EXECUTE ON FUNCTION events_batch_progress(uuid[]) FROM PUBLIC;

-- Jobs inserted by a person: 'jobs.created'. (The pipeline's own inserts, maintenance
-- and notifications, name nobody: the WHEN keeps them, and bulk loads, free of it.)
CREATE FUNCTION jobs_events_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM events_person_jobs('jobs.created',
        (SELECT jsonb_agg(jsonb_build_object('id', id, 'lane', lane, 'type', type)) FROM new_jobs));
    PERFORM events_batch_progress(ARRAY(SELECT DISTINCT batch_id FROM new_jobs WHERE batch_id IS NOT NULL));
    RETURN NULL;
END $$;
CREATE TRIGGER events_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT
    WHEN (events_by_person())
    EXECUTE FUNCTION jobs_events_after_insert();

-- Job updates. By a person: 'jobs.retried' (failed back to pending) and 'jobs.cancelled'
-- (pending to failed). By the pipeline: one 'jobs.settled' per (lane, type) and statement
-- for the jobs that stopped running (a settled batch's completion is one statement),
-- into the lane's room only: {lane, type, runId, done, failed, retrying, deferred}.
-- Batches whose jobs ended or reported progress get 'batch.progress'. A claim (nothing
-- was running, nobody named) returns at the first test.
CREATE FUNCTION jobs_events_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    person boolean := events_by_person();
    a_room text[]; a_type text[]; a_data jsonb[];
BEGIN
    IF NOT person AND NOT EXISTS (SELECT 1 FROM old_jobs WHERE status = 'running') THEN
        RETURN NULL;
    END IF;
    IF person THEN
        PERFORM events_person_jobs('jobs.retried',
            (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
             FROM old_jobs o JOIN new_jobs n ON n.id = o.id
             WHERE o.status = 'failed' AND n.status = 'pending'));
        PERFORM events_person_jobs('jobs.cancelled',
            (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'lane', n.lane, 'type', n.type))
             FROM old_jobs o JOIN new_jobs n ON n.id = o.id
             WHERE o.status = 'pending' AND n.status = 'failed'));
    ELSE
        SELECT array_agg('lane:' || lane ORDER BY lane, type), array_agg('jobs.settled'::text),
               array_agg(jsonb_build_object('lane', lane, 'type', type, 'runId', run_id, 'done', done,
                                            'failed', failed, 'retrying', retrying, 'deferred', deferred)
                         ORDER BY lane, type)
        INTO a_room, a_type, a_data
        FROM (SELECT n.lane, n.type, min(o.run_id::text) AS run_id,
                     count(*) FILTER (WHERE n.status = 'done') AS done,
                     count(*) FILTER (WHERE n.status = 'failed') AS failed,
                     count(*) FILTER (WHERE n.status = 'pending' AND n.attempts >= o.attempts) AS retrying,
                     count(*) FILTER (WHERE n.status = 'pending' AND n.attempts < o.attempts) AS deferred
              FROM old_jobs o JOIN new_jobs n ON n.id = o.id
              WHERE o.status = 'running' AND n.status <> 'running'
              GROUP BY n.lane, n.type) s;
        PERFORM events_emit(a_room, a_type, a_data);
    END IF;
    IF EXISTS (SELECT 1 FROM new_jobs WHERE batch_id IS NOT NULL) THEN
        PERFORM events_batch_progress(ARRAY(
            SELECT DISTINCT n.batch_id FROM old_jobs o JOIN new_jobs n ON n.id = o.id
            WHERE n.batch_id IS NOT NULL
              AND (n.status <> o.status OR n.progress IS DISTINCT FROM o.progress
                   OR n.total IS DISTINCT FROM o.total)
            ORDER BY 1));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_events_after_update();

-- A batch's status: into its room, its owner's account room and 'system'.
CREATE FUNCTION batches_events_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    owner uuid := (SELECT owner_id FROM lanes WHERE id = NEW.lane);
    data jsonb := jsonb_build_object('batch', NEW.id, 'lane', NEW.lane, 'status', NEW.status,
                                     'finishedAt', NEW.finished_at);
BEGIN
    IF owner IS NULL THEN
        PERFORM events_emit(ARRAY['batch:' || NEW.id, 'system'], ARRAY['batch.status', 'batch.status'],
                            ARRAY[data, data]);
    ELSE
        PERFORM events_emit(ARRAY['account:' || owner, 'batch:' || NEW.id, 'system'],
                            ARRAY['batch.status', 'batch.status', 'batch.status'], ARRAY[data, data, data]);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_status AFTER UPDATE OF status ON batches
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION batches_events_after_update();

-- Runs: 'run.started' and 'run.finished' (its stop reason, counts and duration) into 'system'.
CREATE FUNCTION runs_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM events_emit(ARRAY['system'], ARRAY['run.started'],
            ARRAY[jsonb_build_object('run', NEW.id, 'trigger', NEW.trigger, 'startedAt', NEW.started_at)]);
    ELSE
        PERFORM events_emit(ARRAY['system'], ARRAY['run.finished'],
            ARRAY[jsonb_build_object('run', NEW.id, 'trigger', NEW.trigger, 'stopReason', NEW.stop_reason,
                                     'jobsDone', NEW.jobs_done, 'jobsFailed', NEW.jobs_failed,
                                     'jobsDeferred', NEW.jobs_deferred, 'error', NEW.error,
                                     'durationSeconds',
                                     round(extract(epoch FROM NEW.finished_at - NEW.started_at)::numeric, 3))]);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_started AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_events();
CREATE TRIGGER events_finished AFTER UPDATE ON runs
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION runs_events();

-- Who reads a room: an admin any; a tenant its account room, the rooms of lanes it owns
-- and of batches it can see (batches' own row-level security decides); 'system' admins
-- only. Rooms in the tables are always well formed (the triggers write them).
CREATE FUNCTION events_room_readable(p_room text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN (SELECT app_is_admin()) THEN true
        WHEN p_room LIKE 'account:%' THEN p_room = 'account:' || (SELECT app_user_id())
        WHEN p_room LIKE 'lane:%' THEN EXISTS (
            SELECT 1 FROM lanes WHERE id = substr(p_room, 6)::uuid AND owner_id = (SELECT app_user_id()))
        WHEN p_room LIKE 'batch:%' THEN EXISTS (SELECT 1 FROM batches WHERE id = substr(p_room, 7)::uuid)
        ELSE false
    END
$$;

ALTER TABLE events ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON events USING (events_room_readable(room));
ALTER TABLE event_rooms ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON event_rooms USING (events_room_readable(room));
GRANT SELECT ON events, event_rooms TO skiplock_api;
