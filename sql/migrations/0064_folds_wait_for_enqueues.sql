-- A job made pending by a transaction still committing when a fold moved the epoch on was
-- not claimable until the fold after (up to a second): the fold could not see it, so its
-- lane either missed the new epoch (its row written at once into the one the fold left) or
-- entered it as drained (its last job claimed meanwhile).
--
-- Now whatever makes a job pending (an enqueue, a retry, a hand-back) holds a shared lock
-- (job_lanes_pending) until its transaction ends, and the fold, once it has the fold's
-- lock, takes that lock exclusively before it reads anything, waiting at most 20 ms: the
-- enqueues in flight commit first and the fold sees them, while one that comes after
-- waits for the fold's transaction (a few milliseconds) and then sees the new epoch. A
-- transaction that enqueued something and stays open costs each fold those 20 ms (and the
-- enqueues queued behind the fold's wait as much) and is taken along by the next fold, as
-- before.

CREATE FUNCTION job_lanes_await_pending() RETURNS void
LANGUAGE plpgsql SET lock_timeout = '20ms' AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('skiplock.job_lanes_pending'));
EXCEPTION WHEN lock_not_available THEN
    NULL;  -- a transaction that made a job pending is still open: the next fold takes it
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_await_pending() FROM PUBLIC;

-- The fold of migration 0063, renamed; job_lanes_fold() takes the fold's lock, waits for
-- the enqueues in flight, then folds (the fold's lock is the transaction's already)
ALTER FUNCTION job_lanes_fold() RENAME TO job_lanes_fold_lines;

CREATE FUNCTION job_lanes_fold() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('skiplock.job_lanes_fold')) THEN
        RETURN;
    END IF;
    PERFORM job_lanes_await_pending();
    PERFORM job_lanes_fold_lines();
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_fold() FROM PUBLIC;

-- Migration 0051's count, holding job_lanes_pending when it makes a job pending, before it
-- reads the epoch
CREATE OR REPLACE FUNCTION job_lanes_count(types text[], lane_ids uuid[], pending_d integer[],
                                           served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                           out_head timestamptz[], out_ready timestamptz[], may_create boolean)
RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    d_type text[]; d_lane uuid[]; d_p integer[]; d_s integer[]; d_ih timestamptz[]; d_ir timestamptz[];
    d_oh timestamptz[]; d_orr timestamptz[]; now_epoch bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(in_head) h WHERE h IS NOT NULL) THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('skiplock.job_lanes_pending'));
    END IF;
    now_epoch := job_lane_epoch();
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

