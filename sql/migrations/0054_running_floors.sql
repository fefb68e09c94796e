-- The claim's look for expired leases stays flat while a snapshot is held open
-- (docs/queue.md#a-shared-database).
--
-- A claim takes back the running jobs whose lease expired: a walk of jobs_running_idx
-- (type, locked_at) up to now() - lease. Every job that ran since a held snapshot was taken
-- left an entry there that cannot be removed, so once the snapshot is older than the lease
-- that walk passed every job done since. Now it starts at the type's floor: no running job
-- of the type was locked before it.
--
-- * The fold writes each type's floor into the next epoch: the lock time of the oldest
--   running job at or after the old floor, or two seconds before the fold if that is
--   earlier. A claim locks its jobs at the time it writes them (clock_timestamp()), so a
--   claim the fold cannot see yet, one written but not committed, is below the floor only
--   if its commit came more than two seconds after its write. The fold's walk passes only
--   the entries since the last floor.
-- * A lock time moved back by hand (UPDATE ... SET locked_at = now() - interval '1 hour')
--   lowers the current floor at once (the trigger jobs_lock_moved_back).
-- * The stuck sweep, once a minute, lowers each floor to the true oldest lock time, for a
--   claim whose commit took longer than that.
-- * A type with no floor in the current epoch is walked from its first entry.

CREATE TABLE job_running_floors (
    epoch    bigint NOT NULL,
    type     text NOT NULL,
    floor_at timestamptz NOT NULL,
    PRIMARY KEY (epoch, type)
);

-- The current epoch's floor of type t's running jobs' lock times ('-infinity': none known).
CREATE FUNCTION job_running_floor(t text) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT f.floor_at FROM job_running_floors f
                     WHERE f.epoch = job_lane_epoch() AND f.type = t), '-infinity')
$$;

-- Epoch now_epoch + 1's floors: each type that has one now or whose lanes the fold took,
-- from its old floor on. A type kept only by the two seconds and not folded is dropped (its
-- next claim's lines bring it back).
CREATE FUNCTION job_running_floors_next(now_epoch bigint, folded_types text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
    WITH types AS (
        SELECT f.type, f.floor_at AS old_floor FROM job_running_floors f WHERE f.epoch = now_epoch
        UNION
        SELECT DISTINCT t.type, '-infinity'::timestamptz FROM unnest(folded_types) AS t(type)
        WHERE NOT EXISTS (SELECT 1 FROM job_running_floors f WHERE f.epoch = now_epoch AND f.type = t.type)
    ), floors AS (
        SELECT t.type,
               (SELECT j.locked_at FROM jobs j
                WHERE j.type = t.type AND j.status = 'running' AND j.locked_at >= t.old_floor
                ORDER BY j.locked_at LIMIT 1) AS oldest
        FROM types t
    )
    INSERT INTO job_running_floors (epoch, type, floor_at)
    SELECT now_epoch + 1, f.type, least(f.oldest, now() - interval '2 seconds')
    FROM floors f
    WHERE f.oldest IS NOT NULL OR f.type = ANY (folded_types);
    DELETE FROM job_running_floors WHERE epoch <= now_epoch;
$$;
REVOKE EXECUTE ON FUNCTION job_running_floors_next(bigint, text[]) FROM PUBLIC;

-- Lower the current floors of `types` to lock_at (the fold's lock first: a fold under way
-- would write the next epoch from the floor before this).
CREATE FUNCTION job_running_floors_lower(types text[], lock_at timestamptz[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('skiplock.job_lanes_fold'));
    UPDATE job_running_floors f SET floor_at = l.at
    FROM (SELECT t.type, min(t.at) AS at FROM unnest(types, lock_at) AS t(type, at) GROUP BY t.type) l
    WHERE f.epoch = job_lane_epoch() AND f.type = l.type AND l.at < f.floor_at;
END $$;
REVOKE EXECUTE ON FUNCTION job_running_floors_lower(text[], timestamptz[]) FROM PUBLIC;

-- A running job whose lock time is set before its transaction began (by hand: a claim sets
-- the time it writes) may be below the floor: the floor comes down to it.
CREATE FUNCTION jobs_lock_moved_back() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM job_running_floors_lower(ARRAY[NEW.type], ARRAY[NEW.locked_at]);
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_lock_moved_back AFTER UPDATE OF locked_at, status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'running' AND NEW.locked_at < now())
    EXECUTE FUNCTION jobs_lock_moved_back();
CREATE TRIGGER jobs_inserted_running AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.status = 'running' AND NEW.locked_at < now())
    EXECUTE FUNCTION jobs_lock_moved_back();

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

    -- the next epoch's floors of the running jobs' lock times (job_running_floors)
    PERFORM job_running_floors_next(now_epoch, h_type);

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
