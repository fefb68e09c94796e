-- The lane journal and the settled backlog are read from a known position
-- (docs/queue.md#a-shared-database).
--
-- Both tables are appended to and deleted from all the time. While any snapshot is open
-- (a report, a pg_dump), VACUUM removes none of the rows deleted since, and every reader
-- that scanned a lane's lines, or the whole table, walked past all of them: a run's end and
-- the claim's served sum read more with every job done since the snapshot was taken.
--
-- PgQ's answer: each row carries the id of the transaction that inserted it, indexed, and
-- whoever deletes rows records the xmin of the snapshot it deleted under. Every transaction
-- below that xmin had ended, so each of its committed rows was visible to the DELETE and
-- is gone; readers start at the mark, and the rows deleted before it are never visited.
-- A fold or pass that leaves rows behind (held by someone else, past its limit) sets the
-- mark no higher than the smallest id it left. Read-only transactions have no id and hold
-- no mark back; a long transaction that wrote something does, until it ends.

ALTER TABLE job_lane_journal ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
DROP INDEX job_lane_journal_lane_idx;
CREATE INDEX job_lane_journal_lane_idx ON job_lane_journal (type, lane, xid);
-- the run's fold asks what the whole journal holds from its mark on
CREATE INDEX job_lane_journal_xid_idx ON job_lane_journal (xid);

-- A lane's journal lines below journal_from are folded: its folder holds the row and moves
-- the mark in the same update that writes the folded counts.
ALTER TABLE job_lanes ADD COLUMN journal_from xid8 NOT NULL DEFAULT '0';

ALTER TABLE settled_backlog ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX settled_backlog_xid_idx ON settled_backlog (xid);

-- A mark as read back. One above every id this cluster has given out (the current
-- snapshot's xmax) came with a dump restored from another cluster, whose ids are not this
-- one's: it marks nothing here, and the rows are read from the start.
CREATE FUNCTION mark_or_start(mark xid8) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN mark <= pg_snapshot_xmax(pg_current_snapshot()) THEN mark ELSE '0'::xid8 END
$$;

-- Where the whole journal and the whole backlog are read from: every committed row below
-- the newest mark is gone. Appended to and read newest first (the index's top entry), so a
-- reader never walks the marks a held snapshot keeps. A mover replaces the newest mark,
-- and only if it can lock it: movers that overlap leave one mark, not one each.
CREATE TABLE job_lane_journal_marks (xid xid8 NOT NULL);
CREATE INDEX job_lane_journal_marks_idx ON job_lane_journal_marks (xid);
CREATE TABLE settled_backlog_marks (xid xid8 NOT NULL);
CREATE INDEX settled_backlog_marks_idx ON settled_backlog_marks (xid);
INSERT INTO job_lane_journal_marks (xid) VALUES ('0');
INSERT INTO settled_backlog_marks (xid) VALUES ('0');

-- job_lanes_apply of 0033, which also moves the rows' journal marks when given one (the
-- folder's): one row version per fold, not two.
DROP FUNCTION job_lanes_apply(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                              timestamptz[], timestamptz[], boolean);
CREATE FUNCTION job_lanes_apply(types text[], lane_ids uuid[], pending_d integer[],
                                served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                out_head timestamptz[], out_ready timestamptz[], may_create boolean,
                                journal_mark xid8 DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    new_lanes uuid[];
BEGIN
    -- A (type, lane) that gets work for the first time gets its row, ranked as its lane
    -- is (the lane's row is made if missing). The lane row is share-locked first, so a
    -- ranking change that is committing meanwhile is waited for and then seen; one that
    -- comes later waits for this transaction and then finds the new row to update.
    IF may_create THEN
        SELECT array_agg(DISTINCT c.lane ORDER BY c.lane) INTO new_lanes
        FROM unnest(types, lane_ids, served_d, in_head, out_head) AS c(type, lane, s, h, o)
        WHERE (c.h IS NOT NULL OR (c.s > 0 AND c.o IS NULL))
          AND NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.lane = c.lane AND l.type = c.type);
    END IF;
    IF new_lanes IS NOT NULL THEN
        INSERT INTO lanes (id)
        SELECT n.id FROM unnest(new_lanes) AS n(id)
        WHERE NOT EXISTS (SELECT 1 FROM lanes r WHERE r.id = n.id)
        ON CONFLICT (id) DO NOTHING;
        PERFORM 1 FROM lanes r WHERE r.id = ANY (new_lanes) ORDER BY r.id FOR SHARE;
        INSERT INTO job_lanes (type, lane, priority, paused)
        SELECT c.type, c.lane, r.priority, r.paused
        FROM unnest(types, lane_ids) AS c(type, lane)
        JOIN lanes r ON r.id = c.lane
        WHERE c.lane = ANY (new_lanes)
        ORDER BY c.type, c.lane
        ON CONFLICT (lane, type) DO NOTHING;
    END IF;

    -- When a lane's first job may have left, its new head is read from jobs. Lock the
    -- rows first, in order: the UPDATE below is then a new statement with a new snapshot
    -- that sees every change committed by whoever held them before. Read under the
    -- UPDATE's own (older) snapshot, a job another transaction had just made ready could
    -- be missed and the lane marked not ready until its next change.
    -- (A statement of several lanes locks them in order anyway: two such statements
    -- taking the same rows in different orders could deadlock.)
    IF cardinality(lane_ids) > 1 OR EXISTS (SELECT 1 FROM unnest(out_head) AS o(h) WHERE o.h IS NOT NULL) THEN
        PERFORM 1 FROM job_lanes l
        JOIN unnest(types, lane_ids) AS c(type, lane) ON l.lane = c.lane AND l.type = c.type
        ORDER BY l.type, l.lane
        FOR NO KEY UPDATE OF l;
    END IF;

    -- The new head, when the old one may have left, is one probe of jobs_claim_idx. If
    -- that job is ready, it is the lane's witness of ready work (see ready_at above:
    -- exact only while in the future); if not, the earliest run_after is a second probe.
    UPDATE job_lanes l
    SET (pending, served, head_at, ready_at, journal_from) = (
        SELECT l.pending + c.p, l.served + c.s,
               CASE WHEN l.pending + c.p <= 0 THEN NULL
                    WHEN c.oh <= l.head_at THEN coalesce(h.created_at, l.head_at)
                    ELSE least(l.head_at, c.ih) END,
               CASE WHEN l.pending + c.p <= 0 THEN NULL
                    WHEN c.orr <= l.ready_at THEN
                        CASE WHEN h.run_after <= now() THEN h.run_after
                             ELSE coalesce((SELECT j.run_after FROM jobs j
                                            WHERE j.status = 'pending' AND j.type = l.type
                                              AND j.lane = l.lane
                                            ORDER BY j.run_after LIMIT 1), l.ready_at) END
                    ELSE least(l.ready_at, c.ir) END,
               CASE WHEN journal_mark IS NULL THEN l.journal_from
                    ELSE greatest(mark_or_start(l.journal_from), journal_mark) END
        FROM (SELECT) AS one
        LEFT JOIN LATERAL (
            SELECT j.created_at, j.run_after FROM jobs j
            WHERE l.pending + c.p > 0 AND (c.oh <= l.head_at OR c.orr <= l.ready_at)
              AND j.status = 'pending' AND j.type = l.type AND j.lane = l.lane
              -- from the old head on (or an older job this statement made pending): the
              -- entries before it are jobs that left, which a held snapshot keeps unprunable
              AND j.created_at >= least(l.head_at, c.ih)
            ORDER BY j.created_at LIMIT 1
        ) h ON true)
    FROM unnest(types, lane_ids, pending_d, served_d, in_head, in_ready, out_head, out_ready)
         AS c(type, lane, p, s, ih, ir, oh, orr)
    WHERE l.lane = c.lane AND l.type = c.type;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_apply(text[], uuid[], integer[], integer[], timestamptz[],
                                           timestamptz[], timestamptz[], timestamptz[], boolean, xid8)
    FROM PUBLIC;

-- job_lanes_fold_into of 0031, reading each held lane's lines from its mark (held_from:
-- the caller read it from the row it holds) and moving the mark to the xmin its DELETE ran
-- under (taken in the same statement: the same snapshot). The folder holds every line's
-- lane, so it leaves none of a held lane's lines behind.
DROP FUNCTION job_lanes_fold_into(text[], uuid[], text[], uuid[], integer[], integer[],
                                  timestamptz[], timestamptz[]);
CREATE FUNCTION job_lanes_fold_into(held_type text[], held_lane uuid[], held_from xid8[], d_type text[],
                                    d_lane uuid[], d_pending integer[], d_served integer[],
                                    d_out_head timestamptz[], d_out_ready timestamptz[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_p integer[]; a_s integer[]; a_oh timestamptz[]; a_orr timestamptz[];
    a_none timestamptz[]; mark xid8;
BEGIN
    WITH held AS (
        SELECT h.type, h.lane, h.journal_from
        FROM unnest(held_type, held_lane, held_from) AS h(type, lane, journal_from)
    ), taken AS (
        DELETE FROM job_lane_journal j USING held h
        WHERE j.type = h.type AND j.lane = h.lane AND j.xid >= mark_or_start(h.journal_from)
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
           array_agg(NULL::timestamptz), pg_snapshot_xmin(pg_current_snapshot())
    INTO a_type, a_lane, a_p, a_s, a_oh, a_orr, a_none, mark
    FROM (SELECT e.type, e.lane, sum(e.pending)::int AS p, sum(e.served)::int AS s,
                 min(e.out_head) AS oh, min(e.out_ready) AS orr
          FROM every e GROUP BY e.type, e.lane) x;
    IF a_type IS NOT NULL THEN
        PERFORM job_lanes_apply(a_type, a_lane, a_p, a_s, a_none, a_none, a_oh, a_orr, false, mark);
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_fold_into(text[], uuid[], xid8[], text[], uuid[], integer[], integer[],
                                               timestamptz[], timestamptz[]) FROM PUBLIC;

-- job_lanes_count of 0031: the rows it just wrote are held, and the lines waiting for them
-- are looked for from each row's mark.
CREATE OR REPLACE FUNCTION job_lanes_count(types text[], lane_ids uuid[], pending_d integer[],
                                           served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                           out_head timestamptz[], out_ready timestamptz[], may_create boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    free_type text[]; free_lane uuid[]; free_from xid8[]; none text[];
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
        SELECT array_agg(x.type ORDER BY x.type, x.lane), array_agg(x.lane ORDER BY x.type, x.lane),
               array_agg(x.journal_from ORDER BY x.type, x.lane)
        INTO free_type, free_lane, free_from
        FROM (SELECT DISTINCT c.type, c.lane, l.journal_from
              FROM unnest(types, lane_ids) AS c(type, lane)
              JOIN job_lanes l ON l.type = c.type AND l.lane = c.lane
              WHERE EXISTS (SELECT 1 FROM job_lane_journal j
                            WHERE j.type = c.type AND j.lane = c.lane
                              AND j.xid >= mark_or_start(l.journal_from))) x;
        IF free_type IS NOT NULL THEN
            PERFORM job_lanes_fold_into(free_type, free_lane, free_from, none, NULL, NULL, NULL, NULL, NULL);
        END IF;
        RETURN;
    END IF;
    WITH free AS (
        SELECT l.type, l.lane, l.journal_from FROM job_lanes l
        JOIN unnest(types, lane_ids) AS c(type, lane) ON l.lane = c.lane AND l.type = c.type
        ORDER BY l.type, l.lane
        FOR NO KEY UPDATE OF l SKIP LOCKED
    ), journaled AS (
        INSERT INTO job_lane_journal (type, lane, pending, served, out_head, out_ready, hour)
        SELECT c.type, c.lane, c.p, c.s, c.oh, c.orr, date_trunc('hour', now())
        FROM unnest(types, lane_ids, pending_d, served_d, out_head, out_ready) AS c(type, lane, p, s, oh, orr)
        WHERE NOT EXISTS (SELECT 1 FROM free f WHERE f.type = c.type AND f.lane = c.lane)
    )
    SELECT array_agg(type ORDER BY type, lane), array_agg(lane ORDER BY type, lane),
           array_agg(journal_from ORDER BY type, lane)
    INTO free_type, free_lane, free_from FROM free;
    IF free_type IS NOT NULL THEN
        PERFORM job_lanes_fold_into(free_type, free_lane, free_from, types, lane_ids, pending_d, served_d,
                                    out_head, out_ready);
    END IF;
END $$;

-- job_lanes_fold of 0031, from the journal's newest mark: the lanes with lines from there
-- on, the ones nobody holds folded, and the mark moved to the xmin of the snapshot that
-- chose them, or to the smallest line it left (a lane someone else holds).
--
-- The journal's lines from a mark on come by its xid index, never a sequential scan: the
-- table's statistics know nothing of the lines a held snapshot keeps, and the planner
-- scanned the whole journal for them. A function of its own, so that only this read is
-- kept off sequential scans (the fold's reads and writes of job_lanes are planned as usual).
CREATE FUNCTION job_lane_journal_from(from_xid xid8) RETURNS TABLE (type text, lane uuid, xid xid8)
LANGUAGE sql STABLE SET enable_seqscan = off AS $$
    SELECT j.type, j.lane, j.xid FROM job_lane_journal j WHERE j.xid >= from_xid
$$;
REVOKE EXECUTE ON FUNCTION job_lane_journal_from(xid8) FROM PUBLIC;

CREATE OR REPLACE FUNCTION job_lanes_fold() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    held_type text[]; held_lane uuid[]; held_from xid8[]; gone_type text[]; gone_lane uuid[];
    none text[]; from_xid xid8; from_raw xid8; from_at tid; upto xid8;
BEGIN
    SELECT m.xid, m.ctid INTO from_raw, from_at FROM job_lane_journal_marks m ORDER BY m.xid DESC LIMIT 1;
    from_xid := coalesce(mark_or_start(from_raw), '0');
    IF NOT EXISTS (SELECT 1 FROM job_lane_journal_from(from_xid)) THEN
        RETURN;
    END IF;
    -- every committed line below this snapshot's xmin is seen here: its lane is held
    -- (folded below), or left and counted in the smallest line left
    WITH lines AS (
        SELECT * FROM job_lane_journal_from(from_xid)
    ), lined AS (
        SELECT DISTINCT j.type, j.lane FROM lines j
    ), held AS (
        SELECT l.type, l.lane, l.journal_from FROM job_lanes l
        JOIN lined d ON d.type = l.type AND d.lane = l.lane
        ORDER BY l.type, l.lane
        FOR NO KEY UPDATE OF l SKIP LOCKED
    )
    SELECT (SELECT array_agg(type ORDER BY type, lane) FROM held),
           (SELECT array_agg(lane ORDER BY type, lane) FROM held),
           (SELECT array_agg(journal_from ORDER BY type, lane) FROM held),
           (SELECT array_agg(d.type ORDER BY d.type, d.lane) FROM lined d
            WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = d.type AND h.lane = d.lane)
              AND NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.type = d.type AND l.lane = d.lane)),
           (SELECT array_agg(d.lane ORDER BY d.type, d.lane) FROM lined d
            WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = d.type AND h.lane = d.lane)
              AND NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.type = d.type AND l.lane = d.lane)),
           least(pg_snapshot_xmin(pg_current_snapshot()),
                 (SELECT min(j.xid) FROM lines j
                  WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = j.type AND h.lane = j.lane)))
    INTO held_type, held_lane, held_from, gone_type, gone_lane, upto;
    -- lines of lanes whose row is gone (pruned while idle, or the lane deleted) have
    -- nothing to fold into
    IF gone_type IS NOT NULL THEN
        DELETE FROM job_lane_journal j
        USING unnest(gone_type, gone_lane) AS g(type, lane)
        WHERE j.type = g.type AND j.lane = g.lane AND j.xid >= from_xid
          AND NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.type = j.type AND l.lane = j.lane);
    END IF;
    IF held_type IS NOT NULL THEN
        PERFORM job_lanes_fold_into(held_type, held_lane, held_from, none, NULL, NULL, NULL, NULL, NULL);
    END IF;
    IF upto > from_xid THEN
        IF from_at IS NULL THEN
            INSERT INTO job_lane_journal_marks (xid) VALUES (upto);
        ELSE
            -- another fold moving it meanwhile holds or has deleted the newest mark: this
            -- one leaves the mark to it rather than wait
            WITH gone AS (
                DELETE FROM job_lane_journal_marks m
                WHERE m.ctid = ANY (ARRAY(SELECT x.ctid FROM job_lane_journal_marks x
                                          WHERE x.ctid = from_at AND x.xid = from_raw
                                          FOR UPDATE SKIP LOCKED))
                RETURNING 1
            )
            INSERT INTO job_lane_journal_marks (xid) SELECT upto FROM gone;
        END IF;
    END IF;
END $$;

-- The view of 0031: a lane's row plus its journal lines from the lane's mark on.
CREATE OR REPLACE VIEW job_lane_counts AS
SELECT l.type, l.lane, l.priority, l.paused, l.head_at, l.ready_at,
       l.pending + coalesce(j.pending, 0) AS pending,
       l.served + coalesce(j.served, 0) AS served
FROM job_lanes l
LEFT JOIN LATERAL (SELECT sum(n.pending)::int AS pending, sum(n.served)::int AS served
                   FROM job_lane_journal n
                   WHERE n.type = l.type AND n.lane = l.lane
                     AND n.xid >= mark_or_start(l.journal_from)) j ON true;

-- events_number_settled of 0032, from the backlog's newest mark: it takes the oldest 2,000
-- parked rows nobody else is taking, and moves the mark to the xmin of its snapshot, or to
-- the first row it left (another pass's, or past its 2,000). No sequential scans: the
-- table's statistics know nothing of the rows a held snapshot keeps (the planner scanned
-- the whole backlog for "rows from the mark on"), and what the pass and the events it
-- writes read by key is read by index either way.
CREATE OR REPLACE FUNCTION events_number_settled() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '200ms'
    SET enable_seqscan = off AS $$
DECLARE
    rooms text[]; types text[]; data jsonb[]; moved uuid[];
    from_xid xid8; from_raw xid8; from_at tid; upto xid8;
BEGIN
    SELECT m.xid, m.ctid INTO from_raw, from_at FROM settled_backlog_marks m ORDER BY m.xid DESC LIMIT 1;
    from_xid := coalesce(mark_or_start(from_raw), '0');
    IF NOT EXISTS (SELECT 1 FROM settled_backlog s WHERE s.xid >= from_xid) THEN
        RETURN 0;
    END IF;
    BEGIN
        WITH picked AS (
            SELECT s.ctid AS at FROM settled_backlog s
            WHERE s.xid >= from_xid
            ORDER BY s.xid
            LIMIT 2000
            FOR UPDATE SKIP LOCKED
        ), taken AS (
            DELETE FROM settled_backlog b
            WHERE b.ctid = ANY (ARRAY(SELECT at FROM picked))
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
        SELECT (SELECT array_agg('lane:' || lane ORDER BY lane, type) FROM per_lane),
               (SELECT array_agg('jobs.settled'::text) FROM per_lane),
               (SELECT array_agg(jsonb_build_object('lane', lane, 'type', type, 'done', done, 'failed', failed,
                                                    'retrying', retrying, 'deferred', deferred, 'batches', batches,
                                                    'runIds', coalesce(runs, '{}'), 'since', since, 'until', until)
                                 ORDER BY lane, type) FROM per_lane),
               (SELECT array_agg(DISTINCT b ORDER BY b) FROM taken t, unnest(t.batch_ids) AS b),
               -- the taken rows are still visible to this statement: the first row in xid
               -- order that is not one of them is the first one left
               least(pg_snapshot_xmin(pg_current_snapshot()),
                     (SELECT s.xid FROM settled_backlog s
                      WHERE s.xid >= from_xid AND s.ctid NOT IN (SELECT at FROM picked)
                      ORDER BY s.xid LIMIT 1))
        INTO rooms, types, data, moved, upto;
        PERFORM events_emit(rooms, types, data);
        -- each batch moved: one 'batch.progress', counted from its jobs once a pass
        IF moved IS NOT NULL THEN
            PERFORM events_batch_progress(moved);
        END IF;
        IF upto > from_xid THEN
            IF from_at IS NULL THEN
                INSERT INTO settled_backlog_marks (xid) VALUES (upto);
            ELSE
                -- a pass moving it meanwhile holds or has deleted the newest mark: this
                -- one leaves the mark to it rather than wait
                WITH gone AS (
                    DELETE FROM settled_backlog_marks m
                    WHERE m.ctid = ANY (ARRAY(SELECT x.ctid FROM settled_backlog_marks x
                                              WHERE x.ctid = from_at AND x.xid = from_raw
                                              FOR UPDATE SKIP LOCKED))
                    RETURNING 1
                )
                INSERT INTO settled_backlog_marks (xid) SELECT upto FROM gone;
            END IF;
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    RETURN coalesce(cardinality(rooms), 0) + coalesce(cardinality(moved), 0);
END $$;
