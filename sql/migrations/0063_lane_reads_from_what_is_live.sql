-- Two reads that walked what a held snapshot keeps, once ANALYZE had seen the few live rows
-- of the lane tables:
--
-- A lane's row is looked up by (lane, type), newest epoch first (ORDER BY epoch DESC LIMIT 1),
-- in the count every claim, ending and enqueue runs, in a lane's write and in the fold. The
-- planner read that lookup through a bitmap of job_lanes_pkey: every version of the lane's
-- row (one per fold, 850 per lane after a quarter of an hour), fetched and sorted, where the
-- index read backwards stops at the first. These functions plan without bitmaps.
--
-- The fold took each folded lane's journal lines in one DELETE joined to the lanes, which the
-- planner joined by hash over the whole of job_lane_journal_lane_idx: every line folded
-- since the snapshot. It now probes the index lane by lane from the lane's mark.
ALTER FUNCTION job_lanes_count(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                               timestamptz[], timestamptz[], boolean) SET enable_bitmapscan = off;
ALTER FUNCTION job_lanes_write(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                               timestamptz[], timestamptz[]) SET enable_bitmapscan = off;

-- Migration 0058's fold, with the lane's next ready time read as migration 0062 says and the
-- lines taken lane by lane
CREATE OR REPLACE FUNCTION job_lanes_fold() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off
SET enable_bitmapscan = off AS $$
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
            -- one probe of job_lane_journal_lane_idx per lane, from its mark (OFFSET 0: not
            -- joined by hash, which reads the whole index, every line a held snapshot keeps)
            DELETE FROM job_lane_journal j
            WHERE j.ctid = ANY (ARRAY(
                SELECT x.ctid FROM held h
                CROSS JOIN LATERAL (SELECT n.ctid FROM job_lane_journal n
                                    WHERE n.type = h.type AND n.lane = h.lane
                                      AND n.xid >= mark_or_start(h.journal_from)
                                    OFFSET 0) x))
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
                        ELSE least(coalesce(job_lane_next_ready(l.type, l.lane, h.created_at), l.ready_at), c.ir) END,
                   now_epoch + 1,
                   greatest(mark_or_start(l.journal_from), mark),
                   date_trunc('hour', now()),
                   CASE WHEN l.hour_at = date_trunc('hour', now()) THEN l.hour_served + c.hs ELSE c.hs END
            FROM (SELECT) AS one
            LEFT JOIN LATERAL (
                SELECT j.created_at, j.run_after FROM jobs j
                WHERE l.pending + c.p > 0
                  AND j.status = 'pending' AND j.type = l.type AND j.lane = l.lane AND j.priority = 0
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
