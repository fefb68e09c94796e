-- Claims no longer queue on each other's lane counters (docs/performance.md#the-lane-journal).
--
-- Every claim wrote its lanes' job_lanes rows (and their hourly rows) and held them until
-- it committed. Overlapping runs pick the same first lanes from their snapshots, so each
-- claim waited for the one before it to commit: over one drain of ten runs, 32 of the
-- claims' 53 s were spent waiting for those rows.
--
-- Now a statement whose only news for a lane is that jobs left its queue (a claim, a
-- cancel) takes the lane's counter row only if nobody holds it. The rows it gets, it
-- writes as before, with whatever the journal holds for them. For the others it appends
-- a line to job_lane_journal: an insert, which waits for nobody. The lines are folded
-- into the counters by the next writer that holds the lane's row, and at every run's
-- heartbeat and end. Until then the row says the lane has a little more waiting and has
-- been served a little less than is true: a claim may probe a lane that turns out empty,
-- and a lane can get a few more jobs than its turn while the others' claims are in
-- flight. A statement that makes jobs pending (an enqueue, a retry, a hand-back, a
-- deferral) still writes the rows at once, waiting for them, so a waiting job is never
-- hidden from the claim.

CREATE TABLE job_lane_journal (
    type      text NOT NULL,
    lane      uuid NOT NULL,
    pending   integer NOT NULL,
    served    integer NOT NULL,
    out_head  timestamptz,
    out_ready timestamptz,
    hour      timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX job_lane_journal_lane_idx ON job_lane_journal (type, lane);

-- Fold into the counter rows (held_type, held_lane), which this transaction holds: the
-- journal's lines for them, and this statement's own deltas for them (the arrays, as
-- job_lanes_apply takes them; lanes not held are ignored). A new statement, so it sees
-- every line committed by whoever held a row before.
CREATE FUNCTION job_lanes_fold_into(held_type text[], held_lane uuid[], d_type text[],
                                    d_lane uuid[], d_pending integer[], d_served integer[],
                                    d_out_head timestamptz[], d_out_ready timestamptz[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_p integer[]; a_s integer[]; a_oh timestamptz[]; a_orr timestamptz[];
    a_none timestamptz[];
BEGIN
    WITH held AS (
        SELECT h.type, h.lane FROM unnest(held_type, held_lane) AS h(type, lane)
    ), taken AS (
        DELETE FROM job_lane_journal j USING held h
        WHERE j.type = h.type AND j.lane = h.lane
        RETURNING j.type, j.lane, j.pending, j.served, j.out_head, j.out_ready, j.hour
    ), every AS (
        SELECT * FROM taken
        UNION ALL
        SELECT c.type, c.lane, c.p, c.s, c.oh, c.orr, date_trunc('hour', now())
        FROM unnest(d_type, d_lane, d_pending, d_served, d_out_head, d_out_ready) AS c(type, lane, p, s, oh, orr)
        JOIN held h ON h.type = c.type AND h.lane = c.lane
    ), hours AS (
        INSERT INTO job_lane_hours AS h (type, lane, hour, served)
        SELECT e.type, e.lane, e.hour, sum(e.served)::int
        FROM every e
        GROUP BY e.type, e.lane, e.hour
        HAVING sum(e.served) <> 0
        ORDER BY e.type, e.lane, e.hour
        ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served
    )
    SELECT array_agg(type ORDER BY type, lane), array_agg(lane ORDER BY type, lane),
           array_agg(p ORDER BY type, lane), array_agg(s ORDER BY type, lane),
           array_agg(oh ORDER BY type, lane), array_agg(orr ORDER BY type, lane),
           array_agg(NULL::timestamptz)
    INTO a_type, a_lane, a_p, a_s, a_oh, a_orr, a_none
    FROM (SELECT e.type, e.lane, sum(e.pending)::int AS p, sum(e.served)::int AS s,
                 min(e.out_head) AS oh, min(e.out_ready) AS orr
          FROM every e GROUP BY e.type, e.lane) x;
    IF a_type IS NOT NULL THEN
        PERFORM job_lanes_apply(a_type, a_lane, a_p, a_s, a_none, a_none, a_oh, a_orr, false);
    END IF;
END $$;

-- What the jobs trigger does with a statement's per-lane changes (job_lanes_apply's
-- arrays): write them at once when jobs became pending or rows may be new, else write
-- the rows nobody holds and journal the rest.
CREATE FUNCTION job_lanes_count(types text[], lane_ids uuid[], pending_d integer[],
                                served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                out_head timestamptz[], out_ready timestamptz[], may_create boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    free_type text[]; free_lane uuid[]; none text[];
BEGIN
    IF may_create OR EXISTS (SELECT 1 FROM unnest(in_head) AS i(h) WHERE i.h IS NOT NULL) THEN
        PERFORM job_lanes_apply(types, lane_ids, pending_d, served_d, in_head, in_ready,
                                out_head, out_ready, may_create);
        INSERT INTO job_lane_hours AS h (type, lane, hour, served)
        SELECT c.type, c.lane, date_trunc('hour', now()), c.n
        FROM unnest(types, lane_ids, served_d) AS c(type, lane, n)
        WHERE c.n <> 0
        ORDER BY c.type, c.lane
        ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served;
        -- the rows are held now (job_lanes_apply wrote them): fold what waits for them
        SELECT array_agg(j.type ORDER BY j.type, j.lane), array_agg(j.lane ORDER BY j.type, j.lane)
        INTO free_type, free_lane
        FROM (SELECT DISTINCT j.type, j.lane FROM job_lane_journal j
              JOIN unnest(types, lane_ids) AS c(type, lane) ON j.type = c.type AND j.lane = c.lane) j;
        IF free_type IS NOT NULL THEN
            PERFORM job_lanes_fold_into(free_type, free_lane, none, NULL, NULL, NULL, NULL, NULL);
        END IF;
        RETURN;
    END IF;
    WITH free AS (
        SELECT l.type, l.lane FROM job_lanes l
        JOIN unnest(types, lane_ids) AS c(type, lane) ON l.lane = c.lane AND l.type = c.type
        ORDER BY l.type, l.lane
        FOR NO KEY UPDATE OF l SKIP LOCKED
    ), journaled AS (
        INSERT INTO job_lane_journal (type, lane, pending, served, out_head, out_ready, hour)
        SELECT c.type, c.lane, c.p, c.s, c.oh, c.orr, date_trunc('hour', now())
        FROM unnest(types, lane_ids, pending_d, served_d, out_head, out_ready) AS c(type, lane, p, s, oh, orr)
        WHERE NOT EXISTS (SELECT 1 FROM free f WHERE f.type = c.type AND f.lane = c.lane)
    )
    SELECT array_agg(type ORDER BY type, lane), array_agg(lane ORDER BY type, lane)
    INTO free_type, free_lane FROM free;
    IF free_type IS NOT NULL THEN
        PERFORM job_lanes_fold_into(free_type, free_lane, types, lane_ids, pending_d, served_d,
                                    out_head, out_ready);
    END IF;
END $$;

-- Fold the journal into the rows nobody holds (a holder is folding or writing them): a
-- run does at each heartbeat and at its end, so what the last claims of a busy moment
-- journaled does not wait for the next claim of those lanes. Never waits, so a run's end
-- cannot deadlock with the writers of lanes and rooms.
CREATE FUNCTION job_lanes_fold() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    held_type text[]; held_lane uuid[]; none text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job_lane_journal) THEN
        RETURN;
    END IF;
    SELECT array_agg(type ORDER BY type, lane), array_agg(lane ORDER BY type, lane)
    INTO held_type, held_lane
    FROM (SELECT l.type, l.lane FROM job_lanes l
          WHERE EXISTS (SELECT 1 FROM job_lane_journal j WHERE j.type = l.type AND j.lane = l.lane)
          ORDER BY l.type, l.lane
          FOR NO KEY UPDATE OF l SKIP LOCKED) x;
    -- lines of lanes whose row is gone (the lane was deleted) have nothing to fold into
    DELETE FROM job_lane_journal j
    WHERE NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.type = j.type AND l.lane = j.lane);
    IF held_type IS NOT NULL THEN
        PERFORM job_lanes_fold_into(held_type, held_lane, none, NULL, NULL, NULL, NULL, NULL);
    END IF;
END $$;

REVOKE EXECUTE ON FUNCTION job_lanes_fold_into(text[], uuid[], text[], uuid[], integer[], integer[],
                                               timestamptz[], timestamptz[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION job_lanes_count(text[], uuid[], integer[], integer[], timestamptz[],
                                           timestamptz[], timestamptz[], timestamptz[], boolean)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION job_lanes_fold() FROM PUBLIC;

-- The pipeline's 'jobs.settled' events the same way (docs/events.md#numbering). A lane's
-- room row serialises the writers of its events until they commit, and overlapping claims
-- settle jobs of the same lanes. Now the pipeline numbers its events in the rooms nobody
-- holds; an event for a room somebody holds is parked in event_backlog, in the same
-- transaction as the change it describes, and numbered by the next writer that holds
-- the room (parked ones first, in the order they were parked), or at the latest at a
-- run's next heartbeat or end. A room's numbers still grow by one and commit in order:
-- only the room's holder numbers, and it holds the room until it commits. People's
-- events (the API, the CLI) are numbered at once, waiting for the room, as before.
-- No primary key: the one index is the one the numbering reads by (a parked event costs
-- an insert and a delete of one entry).
CREATE TABLE event_backlog (
    id    bigint GENERATED ALWAYS AS IDENTITY,
    room  text NOT NULL,
    type  text NOT NULL,
    data  jsonb NOT NULL,
    at    timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX event_backlog_room_idx ON event_backlog (room, id);

-- Tell the listeners which watched rooms got which numbers ("<room> <first> <last>"
-- lines); a NOTIFY payload holds under 8000 bytes, so long lists go in several.
CREATE FUNCTION events_notify(lines text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    note text := '';
    line text;
BEGIN
    FOREACH line IN ARRAY coalesce(lines, '{}') LOOP
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

-- events_emit as in 0025, its NOTIFY through events_notify.
CREATE OR REPLACE FUNCTION events_emit(p_rooms text[], p_types text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
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
    PERFORM events_notify(lines);
END $$;

-- Number this call's events in the rooms nobody else holds, with what is parked for
-- those rooms and for any other room with parked events that is free; park the rest.
-- Never waits for a room. One statement: a room is locked (its newest version) before
-- its parked events are taken and its head is moved.
CREATE FUNCTION events_emit_or_park(p_rooms text[], p_types text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    lines text[];
BEGIN
    IF NOT events_on() THEN
        RETURN;
    END IF;
    IF p_rooms IS NOT NULL THEN  -- a room's first event makes its row
        INSERT INTO event_rooms (room)
        SELECT DISTINCT r FROM unnest(p_rooms) AS r
        WHERE NOT EXISTS (SELECT 1 FROM event_rooms x WHERE x.room = r)
        ORDER BY r
        ON CONFLICT (room) DO NOTHING;
    END IF;
    WITH e AS (
        SELECT r, t, d, o FROM unnest(p_rooms, p_types, p_data) WITH ORDINALITY AS e(r, t, d, o)
    ), held AS (
        SELECT x.room FROM event_rooms x
        WHERE x.room IN (SELECT r FROM e UNION SELECT b.room FROM event_backlog b)
        ORDER BY x.room
        FOR NO KEY UPDATE SKIP LOCKED
    ), parked AS (
        INSERT INTO event_backlog (room, type, data)
        SELECT e.r, e.t, e.d FROM e WHERE e.r NOT IN (SELECT room FROM held) ORDER BY e.o
    ), taken AS (
        DELETE FROM event_backlog b WHERE b.room IN (SELECT room FROM held)
        RETURNING b.id, b.room, b.type, b.data, b.at
    ), every AS (
        SELECT room, type, data, at, row_number() OVER (PARTITION BY room ORDER BY late, o) AS k
        FROM (SELECT room, type, data, at, false AS late, id AS o FROM taken
              UNION ALL
              SELECT r, t, d, now(), true, o FROM e WHERE r IN (SELECT room FROM held)) x
    ), n AS (
        SELECT room, count(*) AS c FROM every GROUP BY room
    ), heads AS (
        UPDATE event_rooms x SET head_seq = x.head_seq + n.c
        FROM n WHERE x.room = n.room
        RETURNING x.room, x.head_seq
    ), ins AS (
        INSERT INTO events (room, seq, type, data, at)
        SELECT v.room, h.head_seq - n.c + v.k, v.type, v.data, v.at
        FROM every v JOIN n ON n.room = v.room JOIN heads h ON h.room = v.room
    )
    SELECT array_agg(h.room || ' ' || (h.head_seq - n.c + 1) || ' ' || h.head_seq ORDER BY h.room) INTO lines
    FROM heads h JOIN n ON n.room = h.room
    WHERE EXISTS (SELECT 1 FROM event_watch w WHERE w.room = h.room);
    PERFORM events_notify(lines);
END $$;
REVOKE EXECUTE ON FUNCTION events_emit_or_park(text[], text[], jsonb[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION events_notify(text[]) FROM PUBLIC;

-- A lane's counts as readers want them: its row plus what the journal holds for it (a
-- few lines while runs overlap), so a figure is exact before the lines are folded in.
-- The claim reads job_lanes itself (it walks job_lanes_claim_idx) and adds the journal's
-- served the same way.
CREATE VIEW job_lane_counts AS
SELECT l.type, l.lane, l.priority, l.paused, l.head_at, l.ready_at,
       l.pending + coalesce(j.pending, 0) AS pending,
       l.served + coalesce(j.served, 0) AS served
FROM job_lanes l
LEFT JOIN (SELECT type, lane, sum(pending)::int AS pending, sum(served)::int AS served
           FROM job_lane_journal GROUP BY type, lane) j ON j.type = l.type AND j.lane = l.lane;

-- How many jobs wait in the caller's own lanes (0029), from those counts.
CREATE OR REPLACE FUNCTION app_waiting_jobs() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT coalesce(sum(c.pending), 0)::bigint
    FROM lanes l JOIN job_lane_counts c ON c.lane = l.id
    WHERE l.owner_id = (SELECT app_user_id())
$$;

-- A run folds the journal and numbers what is parked as it beats and when it ends (a row
-- trigger: its WHEN is evaluated in C, so any other update of runs calls nothing).
CREATE FUNCTION runs_fold_what_waits() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM job_lanes_fold();
    IF EXISTS (SELECT 1 FROM event_backlog) THEN
        PERFORM events_emit_or_park(NULL, NULL, NULL);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER fold_what_waits AFTER UPDATE OF heartbeat_at, finished_at ON runs
    FOR EACH ROW WHEN (NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at
                       OR NEW.finished_at IS DISTINCT FROM OLD.finished_at)
    EXECUTE FUNCTION runs_fold_what_waits();

-- The jobs trigger of 0025, with its counting through job_lanes_count.
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
        PERFORM job_lanes_count(a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready,
                                a_out_head, a_out_ready, a_may_create);
    END IF;
    IF s_room IS NOT NULL THEN
        PERFORM events_emit_or_park(s_room, s_type, s_data);
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
