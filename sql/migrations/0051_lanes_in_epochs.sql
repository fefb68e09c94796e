-- The lane counters stay flat while a snapshot is held open (docs/queue.md#a-shared-database).
--
-- Until now every claim and every enqueue rewrote its lanes' job_lanes rows. While a
-- report or a pg_dump holds a snapshot, none of those versions can be removed, and each
-- claim's walk of the lanes in claim order, and each lookup of a lane's row, passed all of
-- them: the claim read more with every job done since the snapshot was taken.
--
-- Now a lane's row is written once per fold, not once per claim:
-- * Claims, endings, deferrals and the enqueues into a lane the claim already walks append
--   a line to the journal and write no row. A job that becomes pending ahead of the row's
--   head (a retry, a hand-back) or of its ready time, or into a lane the claim does not walk
--   yet, writes the row at once (it must be found), and appends an empty line as well.
-- * The fold (a claim's, at most once a second, and a run's heartbeat and end) takes every
--   line since the journal's mark, and writes each lane that had lines or that the claim
--   walks into the next epoch: its counts with the lines added, its head and ready time
--   probed again.
-- * The claim walks only the current epoch's entries of job_lanes_claim_idx: one entry per
--   lane, the versions the folds left behind all lie in older epochs, before the range.
-- * A lane's row is found newest version first, by (lane, type, epoch): the key of every
--   version is new, so neither a lookup nor the unique check of a write visits the old
--   ones. One row per (lane, type) is kept by job_lane_keys, whose row a maker locks.
-- * The served counts by hour: the row holds its current hour's count, and writes it to
--   job_lane_hours once the hour has passed (one row per lane and hour, written once).

CREATE TABLE job_lane_epochs (
    epoch bigint PRIMARY KEY,
    at    timestamptz NOT NULL DEFAULT now()
);
INSERT INTO job_lane_epochs (epoch) VALUES (1);

CREATE TABLE job_lane_keys (
    lane uuid NOT NULL,
    type text NOT NULL,
    PRIMARY KEY (lane, type)
);
INSERT INTO job_lane_keys (lane, type) SELECT lane, type FROM job_lanes;

ALTER TABLE job_lanes ADD COLUMN epoch bigint NOT NULL DEFAULT 1,
                      ADD COLUMN hour_at timestamptz,
                      ADD COLUMN hour_served integer NOT NULL DEFAULT 0;
ALTER TABLE job_lanes DROP CONSTRAINT job_lanes_pkey;
ALTER TABLE job_lanes ADD PRIMARY KEY (lane, type, epoch);
DROP INDEX job_lanes_claim_idx;
CREATE INDEX job_lanes_claim_idx ON job_lanes (epoch, type, priority DESC, served, head_at, ready_at)
    WHERE pending > 0 AND NOT paused;

-- A line also carries the oldest created_at and earliest run_after among the jobs it made
-- pending: a fold that probed the lane's head before the line's transaction committed may
-- have moved the head past them, and the next fold, which folds the line, moves it back.
-- A line with no hour is not a claim's: an expiry's negative served, or an empty line that
-- asks the next fold to take the lane into its epoch.
ALTER TABLE job_lane_journal ADD COLUMN in_head timestamptz,
                             ADD COLUMN in_ready timestamptz,
                             ALTER COLUMN hour DROP NOT NULL;

-- The current epoch: the newest row's (read from the index's top entry).
CREATE FUNCTION job_lane_epoch() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT e.epoch FROM job_lane_epochs e ORDER BY e.epoch DESC LIMIT 1), 0)
$$;

-- The rows' hours that have passed, written to job_lane_hours before the rows start the
-- next one. The rows named by their whole key, which their writer holds.
CREATE FUNCTION job_lanes_close_hours(types text[], lane_ids uuid[], epochs bigint[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO job_lane_hours AS h (type, lane, hour, served)
    SELECT l.type, l.lane, l.hour_at, l.hour_served
    FROM unnest(types, lane_ids, epochs) AS c(type, lane, e)
    JOIN job_lanes l ON l.lane = c.lane AND l.type = c.type AND l.epoch = c.e
    WHERE l.hour_at < date_trunc('hour', now()) AND l.hour_served <> 0
    ORDER BY l.type, l.lane
    ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served
$$;
REVOKE EXECUTE ON FUNCTION job_lanes_close_hours(text[], uuid[], bigint[]) FROM PUBLIC;

-- Write lanes' rows at once, in the current epoch (or a later one a fold gave them): the
-- deltas and heads as job_lanes_apply wrote them, rows made for lanes that have none.
-- Arrays in (type, lane) order, one element per (type, lane).
--
-- Here, in job_lanes_count and in the fold, no sequential scans: the tables' statistics
-- know nothing of the versions a held snapshot keeps (the lane rows' of every fold, the
-- journal's lines), and a plan that joins by scanning them whole reads every one; all of it
-- is read by key.
CREATE FUNCTION job_lanes_write(types text[], lane_ids uuid[], pending_d integer[],
                                served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                out_head timestamptz[], out_ready timestamptz[])
RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    new_lanes uuid[]; epochs bigint[]; now_epoch bigint; attempt integer;
BEGIN
    -- twice at most: a row pruned (idle, nothing served) between the check and the lock is
    -- made again
    FOR attempt IN 1..2 LOOP
        SELECT array_agg(DISTINCT c.lane ORDER BY c.lane) INTO new_lanes
        FROM unnest(types, lane_ids) AS c(type, lane)
        WHERE NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.lane = c.lane AND l.type = c.type
                          ORDER BY l.epoch DESC LIMIT 1);
        IF new_lanes IS NOT NULL THEN
            -- ranked as its lane is: the lane row is share-locked first, so a ranking change
            -- that is committing is waited for and seen, and a later one finds the new row
            INSERT INTO lanes (id)
            SELECT n.id FROM unnest(new_lanes) AS n(id)
            WHERE NOT EXISTS (SELECT 1 FROM lanes r WHERE r.id = n.id)
            ON CONFLICT (id) DO NOTHING;
            PERFORM 1 FROM lanes r WHERE r.id = ANY (new_lanes) ORDER BY r.id FOR SHARE;
            -- one maker at a time per (lane, type): the key row, made if missing, is locked,
            -- and the row made only if the next statement's snapshot still finds none
            INSERT INTO job_lane_keys (lane, type)
            SELECT c.lane, c.type FROM unnest(types, lane_ids) AS c(type, lane)
            JOIN unnest(new_lanes) AS n(id) ON n.id = c.lane
            ORDER BY c.type, c.lane
            ON CONFLICT (lane, type) DO NOTHING;
            PERFORM 1 FROM job_lane_keys k
            JOIN unnest(types, lane_ids) AS c(type, lane) ON k.lane = c.lane AND k.type = c.type
            JOIN unnest(new_lanes) AS n(id) ON n.id = c.lane
            ORDER BY k.type, k.lane
            FOR UPDATE OF k;
            INSERT INTO job_lanes (type, lane, priority, paused, epoch)
            SELECT c.type, c.lane, r.priority, r.paused, job_lane_epoch()
            FROM unnest(types, lane_ids) AS c(type, lane)
            JOIN unnest(new_lanes) AS n(id) ON n.id = c.lane
            JOIN lanes r ON r.id = c.lane
            WHERE NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.lane = c.lane AND l.type = c.type
                              ORDER BY l.epoch DESC LIMIT 1);
        END IF;

        -- each lane's newest row, locked in (type, lane) order; the statements below are new
        -- ones, whose snapshots see every change committed by whoever held the rows before
        SELECT array_agg(r.epoch ORDER BY c.i) INTO epochs
        FROM unnest(types, lane_ids) WITH ORDINALITY AS c(type, lane, i)
        LEFT JOIN LATERAL (
            SELECT l.epoch FROM job_lanes l
            WHERE l.lane = c.lane AND l.type = c.type
            ORDER BY l.epoch DESC LIMIT 1
            FOR NO KEY UPDATE
        ) r ON true;
        EXIT WHEN array_position(epochs, NULL) IS NULL;
    END LOOP;
    now_epoch := job_lane_epoch();

    PERFORM job_lanes_close_hours(types, lane_ids, epochs);

    -- The new head, when the old one may have left, is one probe of jobs_claim_idx from the
    -- old head. If that job is ready, it is the lane's witness of ready work; if not, the
    -- earliest run_after is a second probe.
    UPDATE job_lanes l
    SET (pending, served, head_at, ready_at, epoch, hour_at, hour_served) = (
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
               greatest(l.epoch, now_epoch),
               date_trunc('hour', now()),
               CASE WHEN l.hour_at = date_trunc('hour', now()) THEN l.hour_served + c.s ELSE c.s END
        FROM (SELECT) AS one
        LEFT JOIN LATERAL (
            SELECT j.created_at, j.run_after FROM jobs j
            WHERE l.pending + c.p > 0 AND (c.oh <= l.head_at OR c.orr <= l.ready_at)
              AND j.status = 'pending' AND j.type = l.type AND j.lane = l.lane
              AND j.created_at >= least(l.head_at, c.ih)
            ORDER BY j.created_at LIMIT 1
        ) h ON true)
    FROM unnest(types, lane_ids, pending_d, served_d, in_head, in_ready, out_head, out_ready, epochs)
         AS c(type, lane, p, s, ih, ir, oh, orr, e)
    WHERE l.lane = c.lane AND l.type = c.type AND l.epoch = c.e;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_write(text[], uuid[], integer[], integer[], timestamptz[],
                                           timestamptz[], timestamptz[], timestamptz[]) FROM PUBLIC;

-- What the jobs triggers count, per (type, lane) in (type, lane) order. A lane the claim
-- walks already (its row is in the current epoch, waiting work, its head and ready time no
-- later than the jobs this statement made pending), and every change that makes nothing
-- pending, gets a journal line and no write. The others write their row at once (the claim
-- must find the new work) and leave an empty line, so that the next fold takes the lane into
-- its epoch even if a fold moved on while this transaction was open. (may_create, from the
-- triggers' calls, is not needed: a lane without a row always gets one written.)
CREATE OR REPLACE FUNCTION job_lanes_count(types text[], lane_ids uuid[], pending_d integer[],
                                           served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                           out_head timestamptz[], out_ready timestamptz[], may_create boolean)
RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    d_type text[]; d_lane uuid[]; d_p integer[]; d_s integer[]; d_ih timestamptz[]; d_ir timestamptz[];
    d_oh timestamptz[]; d_orr timestamptz[]; now_epoch bigint := job_lane_epoch();
BEGIN
    WITH c AS (
        SELECT c.*, r.epoch, r.pending AS row_pending, r.paused, r.head_at, r.ready_at,
               r.epoch IS NOT NULL AS has_row
        FROM unnest(types, lane_ids, pending_d, served_d, in_head, in_ready, out_head, out_ready)
             WITH ORDINALITY AS c(type, lane, p, s, ih, ir, oh, orr, i)
        LEFT JOIN LATERAL (
            SELECT l.epoch, l.pending, l.paused, l.head_at, l.ready_at FROM job_lanes l
            WHERE l.lane = c.lane AND l.type = c.type
            ORDER BY l.epoch DESC LIMIT 1
        ) r ON true
    ), decided AS (
        SELECT c.*,
               CASE WHEN NOT c.has_row THEN c.ih IS NOT NULL OR c.s > 0
                    WHEN c.ih IS NULL OR c.paused THEN false
                    ELSE NOT coalesce(c.epoch >= now_epoch AND c.row_pending > 0
                                      AND c.head_at <= c.ih AND c.ready_at <= c.ir, false) END AS direct
        FROM c
    ), lined AS (
        INSERT INTO job_lane_journal (type, lane, pending, served, out_head, out_ready, in_head, in_ready, hour)
        SELECT d.type, d.lane, d.p, d.s, d.oh, d.orr, d.ih, d.ir, date_trunc('hour', now())
        FROM decided d WHERE NOT d.direct
        UNION ALL
        SELECT d.type, d.lane, 0, 0, NULL, NULL, NULL, NULL, NULL
        FROM decided d WHERE d.direct
    )
    SELECT array_agg(d.type ORDER BY d.i), array_agg(d.lane ORDER BY d.i), array_agg(d.p ORDER BY d.i),
           array_agg(d.s ORDER BY d.i), array_agg(d.ih ORDER BY d.i), array_agg(d.ir ORDER BY d.i),
           array_agg(d.oh ORDER BY d.i), array_agg(d.orr ORDER BY d.i)
    INTO d_type, d_lane, d_p, d_s, d_ih, d_ir, d_oh, d_orr
    FROM decided d WHERE d.direct;
    IF d_type IS NOT NULL THEN
        PERFORM job_lanes_write(d_type, d_lane, d_p, d_s, d_ih, d_ir, d_oh, d_orr);
    END IF;
END $$;

-- The insert and delete triggers of 0013, counting through job_lanes_count as updates do.
CREATE OR REPLACE FUNCTION jobs_lanes_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_pending integer[]; a_head timestamptz[]; a_ready timestamptz[];
    a_zero integer[]; a_none timestamptz[];
BEGIN
    SELECT array_agg(type), array_agg(lane), array_agg(n), array_agg(head),
           array_agg(ready), array_agg(0), array_agg(NULL::timestamptz)
    INTO a_type, a_lane, a_pending, a_head, a_ready, a_zero, a_none
    FROM (SELECT type, lane, count(*)::int AS n, min(created_at) AS head, min(run_after) AS ready
          FROM new_jobs WHERE status = 'pending' GROUP BY type, lane ORDER BY type, lane) x;
    IF a_type IS NOT NULL THEN
        PERFORM job_lanes_count(a_type, a_lane, a_pending, a_zero, a_head, a_ready, a_none, a_none, true);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION jobs_lanes_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_pending integer[]; a_head timestamptz[]; a_ready timestamptz[];
    a_zero integer[]; a_none timestamptz[];
BEGIN
    SELECT array_agg(type), array_agg(lane), array_agg(-n), array_agg(head),
           array_agg(ready), array_agg(0), array_agg(NULL::timestamptz)
    INTO a_type, a_lane, a_pending, a_head, a_ready, a_zero, a_none
    FROM (SELECT type, lane, count(*)::int AS n, min(created_at) AS head, min(run_after) AS ready
          FROM old_jobs WHERE status = 'pending' GROUP BY type, lane ORDER BY type, lane) x;
    IF a_type IS NOT NULL THEN
        PERFORM job_lanes_count(a_type, a_lane, a_pending, a_zero, a_none, a_none, a_head, a_ready, false);
    END IF;
    RETURN NULL;
END $$;

-- The fold: every line from the journal's mark on, and every lane the claim walks, into the
-- next epoch. One at a time (a try-lock: a fold that finds another running leaves it the
-- work). Lanes someone holds (a write at once, a ranking change) are left to the next fold,
-- with an empty line that makes sure it takes them; the mark stays below every line left.
CREATE OR REPLACE FUNCTION job_lanes_fold() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    from_xid xid8; from_raw xid8; from_at tid; upto xid8; now_epoch bigint; mark xid8;
    h_type text[]; h_lane uuid[]; h_epoch bigint[]; h_from xid8[];
    s_type text[]; s_lane uuid[]; gone_type text[]; gone_lane uuid[];
    f_p integer[]; f_s integer[]; f_hs integer[]; f_ih timestamptz[]; f_ir timestamptz[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('skiplock.job_lanes_fold')) THEN
        RETURN;
    END IF;
    SELECT m.xid, m.ctid INTO from_raw, from_at FROM job_lane_journal_marks m ORDER BY m.xid DESC LIMIT 1;
    from_xid := coalesce(mark_or_start(from_raw), '0');
    IF NOT EXISTS (SELECT 1 FROM job_lane_journal_from(from_xid)) THEN
        RETURN;  -- no row was written and nothing counted since the last fold
    END IF;
    now_epoch := job_lane_epoch();

    WITH lines AS (
        SELECT * FROM job_lane_journal_from(from_xid)
    ), lined AS (
        SELECT DISTINCT j.type, j.lane FROM lines j
    ), wanted AS (
        SELECT l.type, l.lane, l.epoch FROM job_lanes l
        WHERE l.epoch = now_epoch AND l.pending > 0 AND NOT l.paused
        UNION
        SELECT d.type, d.lane, r.epoch FROM lined d
        CROSS JOIN LATERAL (SELECT l.epoch FROM job_lanes l WHERE l.lane = d.lane AND l.type = d.type
                            ORDER BY l.epoch DESC LIMIT 1) r
    ), held AS (
        SELECT x.type, x.lane, x.epoch, x.journal_from
        FROM (SELECT * FROM wanted ORDER BY type, lane) w
        CROSS JOIN LATERAL (
            SELECT l.type, l.lane, l.epoch, l.journal_from FROM job_lanes l
            WHERE l.lane = w.lane AND l.type = w.type AND l.epoch = w.epoch
            FOR NO KEY UPDATE SKIP LOCKED
        ) x
    )
    SELECT (SELECT array_agg(type ORDER BY type, lane) FROM held),
           (SELECT array_agg(lane ORDER BY type, lane) FROM held),
           (SELECT array_agg(epoch ORDER BY type, lane) FROM held),
           (SELECT array_agg(journal_from ORDER BY type, lane) FROM held),
           (SELECT array_agg(w.type) FROM wanted w
            WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = w.type AND h.lane = w.lane)),
           (SELECT array_agg(w.lane) FROM wanted w
            WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = w.type AND h.lane = w.lane)),
           (SELECT array_agg(d.type) FROM lined d
            WHERE NOT EXISTS (SELECT 1 FROM wanted w WHERE w.type = d.type AND w.lane = d.lane)),
           (SELECT array_agg(d.lane) FROM lined d
            WHERE NOT EXISTS (SELECT 1 FROM wanted w WHERE w.type = d.type AND w.lane = d.lane)),
           -- every committed line below this snapshot's xmin is seen here: its lane is held
           -- (folded below), or left and counted in the smallest line left
           least(pg_snapshot_xmin(pg_current_snapshot()),
                 (SELECT min(j.xid) FROM lines j
                  WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.type = j.type AND h.lane = j.lane)
                    AND EXISTS (SELECT 1 FROM wanted w WHERE w.type = j.type AND w.lane = j.lane)))
    INTO h_type, h_lane, h_epoch, h_from, s_type, s_lane, gone_type, gone_lane, upto;

    -- lines of lanes whose row is gone (pruned while idle, or the lane deleted) have nothing
    -- to fold into
    IF gone_type IS NOT NULL THEN
        DELETE FROM job_lane_journal j
        USING unnest(gone_type, gone_lane) AS g(type, lane)
        WHERE j.type = g.type AND j.lane = g.lane AND j.xid >= from_xid
          AND NOT EXISTS (SELECT 1 FROM job_lanes l WHERE l.lane = j.lane AND l.type = j.type
                          ORDER BY l.epoch DESC LIMIT 1);
    END IF;
    IF s_type IS NOT NULL THEN
        INSERT INTO job_lane_journal (type, lane, pending, served)
        SELECT s.type, s.lane, 0, 0 FROM unnest(s_type, s_lane) AS s(type, lane);
    END IF;

    IF h_type IS NOT NULL THEN
        -- each held lane's lines from its own mark on, taken; the mark its row gets is the
        -- xmin of the snapshot the DELETE ran under (the same statement)
        WITH held AS (
            SELECT h.type, h.lane, h.journal_from, h.i
            FROM unnest(h_type, h_lane, h_from) WITH ORDINALITY AS h(type, lane, journal_from, i)
        ), taken AS (
            DELETE FROM job_lane_journal j USING held h
            WHERE j.type = h.type AND j.lane = h.lane AND j.xid >= mark_or_start(h.journal_from)
            RETURNING j.type, j.lane, j.pending, j.served, j.hour, j.in_head, j.in_ready
        ), sums AS (
            SELECT t.type, t.lane, sum(t.pending)::int AS p, sum(t.served)::int AS s,
                   coalesce(sum(t.served) FILTER (WHERE t.hour IS NOT NULL), 0)::int AS hs,
                   min(t.in_head) AS ih, min(t.in_ready) AS ir
            FROM taken t GROUP BY t.type, t.lane
        )
        SELECT array_agg(coalesce(s.p, 0) ORDER BY h.i), array_agg(coalesce(s.s, 0) ORDER BY h.i),
               array_agg(coalesce(s.hs, 0) ORDER BY h.i), array_agg(s.ih ORDER BY h.i),
               array_agg(s.ir ORDER BY h.i), pg_snapshot_xmin(pg_current_snapshot())
        INTO f_p, f_s, f_hs, f_ih, f_ir, mark
        FROM held h LEFT JOIN sums s ON s.type = h.type AND s.lane = h.lane;

        PERFORM job_lanes_close_hours(h_type, h_lane, h_epoch);

        -- The head is probed from the old one (or from an older job a line made pending): the
        -- entries before it are jobs that left, which a held snapshot keeps unprunable. If the
        -- head job is ready it witnesses ready work; if not, the earliest run_after is read.
        UPDATE job_lanes l
        SET (pending, served, head_at, ready_at, epoch, journal_from, hour_at, hour_served) = (
            SELECT l.pending + c.p, l.served + c.s,
                   CASE WHEN l.pending + c.p <= 0 THEN NULL
                        ELSE coalesce(h.created_at, least(l.head_at, c.ih)) END,
                   CASE WHEN l.pending + c.p <= 0 THEN NULL
                        WHEN h.run_after <= now() THEN least(h.run_after, c.ir)
                        ELSE least(coalesce((SELECT j.run_after FROM jobs j
                                             WHERE j.status = 'pending' AND j.type = l.type
                                               AND j.lane = l.lane
                                             ORDER BY j.run_after LIMIT 1), l.ready_at), c.ir) END,
                   now_epoch + 1,
                   greatest(mark_or_start(l.journal_from), mark),
                   date_trunc('hour', now()),
                   CASE WHEN l.hour_at = date_trunc('hour', now()) THEN l.hour_served + c.hs ELSE c.hs END
            FROM (SELECT) AS one
            LEFT JOIN LATERAL (
                SELECT j.created_at, j.run_after FROM jobs j
                WHERE l.pending + c.p > 0
                  AND j.status = 'pending' AND j.type = l.type AND j.lane = l.lane
                  AND j.created_at >= coalesce(least(l.head_at, c.ih), '-infinity')
                ORDER BY j.created_at LIMIT 1
            ) h ON true)
        FROM unnest(h_type, h_lane, h_epoch, f_p, f_s, f_hs, f_ih, f_ir)
             AS c(type, lane, e, p, s, hs, ih, ir)
        WHERE l.lane = c.lane AND l.type = c.type AND l.epoch = c.e;
    END IF;

    -- the next epoch, in the same transaction as the rows written into it
    INSERT INTO job_lane_epochs (epoch, at) VALUES (now_epoch + 1, clock_timestamp());
    DELETE FROM job_lane_epochs WHERE epoch = now_epoch;

    IF upto > from_xid THEN
        IF from_at IS NULL THEN
            INSERT INTO job_lane_journal_marks (xid) VALUES (upto);
        ELSE
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

-- A claim folds when the epoch is a second old, counted from the end of the fold that made
-- it (a slow fold is never followed by another at once); the fold's lock taken by another
-- claim or a heartbeat, this one does not wait for it.
CREATE FUNCTION job_lanes_fold_if_due() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF (SELECT e.at FROM job_lane_epochs e ORDER BY e.epoch DESC LIMIT 1) > now() - interval '1 second' THEN
        RETURN false;
    END IF;
    PERFORM job_lanes_fold();
    RETURN true;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_fold_if_due() FROM PUBLIC;

-- A lane's ranking changed: copied onto its rows of every type, which enter the current
-- epoch (a lane resumed is walked again at once), with an empty line for the next fold.
CREATE OR REPLACE FUNCTION lanes_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM job_lanes l JOIN new_lanes n ON n.id = l.lane
    WHERE (l.priority, l.paused) IS DISTINCT FROM (n.priority, n.paused)
    ORDER BY l.type, l.lane
    FOR NO KEY UPDATE OF l;
    WITH changed AS (
        UPDATE job_lanes l SET priority = n.priority, paused = n.paused,
                               epoch = greatest(l.epoch, job_lane_epoch())
        FROM new_lanes n
        WHERE l.lane = n.id AND (l.priority, l.paused) IS DISTINCT FROM (n.priority, n.paused)
        RETURNING l.type, l.lane
    )
    INSERT INTO job_lane_journal (type, lane, pending, served)
    SELECT c.type, c.lane, 0, 0 FROM changed c;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION lanes_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM jobs WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lanes WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lane_keys WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lane_hours WHERE lane IN (SELECT id FROM old_lanes);
    RETURN NULL;
END $$;

-- Served counts by hour, the row's current hour included.
CREATE VIEW job_lane_served_hours AS
SELECT h.type, h.lane, h.hour, h.served FROM job_lane_hours h
UNION ALL
SELECT l.type, l.lane, l.hour_at, l.hour_served FROM job_lanes l WHERE l.hour_served <> 0;

DROP FUNCTION job_lanes_fold_into(text[], uuid[], xid8[], text[], uuid[], integer[], integer[],
                                  timestamptz[], timestamptz[]);
DROP FUNCTION job_lanes_apply(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                              timestamptz[], timestamptz[], boolean, xid8);
