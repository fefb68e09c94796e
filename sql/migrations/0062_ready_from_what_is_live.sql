-- When a lane's head job is not ready, or no job of priority 0 is left from the head on, a
-- lane row's ready_at (when the lane next has ready work) came from the earliest run_after
-- of its pending jobs, read off jobs_wake_idx (type, lane, run_after) from the lane's first
-- entry: while a snapshot is held, every job the lane has had since. A fold met it on about
-- a third of the lanes each second, because a lane's last pending job is often claimed
-- between the fold's count and its write (200-500 ms folds after ten minutes of a pin).
-- job_lane_next_ready reads only what is live or ahead: a ready job of priority 0 from the
-- head on (the walk a claim's probe makes), a ranked job's run_after (jobs_claim_ranked_idx),
-- and the earliest run_after still to come, read from now on.
CREATE FUNCTION job_lane_next_ready(lane_type text, lane_id uuid, head timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT least(
        -- readiness as an expression: jobs_claim_idx, from the head, is the one index for it
        (SELECT j.run_after FROM jobs j
         WHERE j.status = 'pending' AND j.type = lane_type AND j.lane = lane_id AND j.priority = 0
           AND j.created_at >= head AND (j.run_after <= now()) IS TRUE
         ORDER BY j.created_at LIMIT 1),
        (SELECT min(j.run_after) FROM jobs j
         WHERE j.status = 'pending' AND j.type = lane_type AND j.lane = lane_id AND j.priority <> 0),
        (SELECT j.run_after FROM jobs j
         WHERE j.status = 'pending' AND j.type = lane_type AND j.lane = lane_id AND j.run_after > now()
         ORDER BY j.run_after LIMIT 1))
$$;
REVOKE EXECUTE ON FUNCTION job_lane_next_ready(text, uuid, timestamptz) FROM PUBLIC;

-- Migration 0058's write of a lane row at once, as it was but for the read above; the fold
-- that reads it is migration 0063's.

CREATE OR REPLACE FUNCTION job_lanes_write(types text[], lane_ids uuid[], pending_d integer[],
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
                             ELSE coalesce(job_lane_next_ready(l.type, l.lane, h.created_at), l.ready_at) END
                    ELSE least(l.ready_at, c.ir) END,
               greatest(l.epoch, now_epoch),
               date_trunc('hour', now()),
               CASE WHEN l.hour_at = date_trunc('hour', now()) THEN l.hour_served + c.s ELSE c.s END
        FROM (SELECT) AS one
        LEFT JOIN LATERAL (
            SELECT j.created_at, j.run_after FROM jobs j
            WHERE l.pending + c.p > 0 AND (c.oh <= l.head_at OR c.orr <= l.ready_at)
              AND j.status = 'pending' AND j.type = l.type AND j.lane = l.lane AND j.priority = 0
              AND j.created_at >= least(l.head_at, c.ih)
            ORDER BY j.created_at LIMIT 1
        ) h ON true)
    FROM unnest(types, lane_ids, pending_d, served_d, in_head, in_ready, out_head, out_ready, epochs)
         AS c(type, lane, p, s, ih, ir, oh, orr, e)
    WHERE l.lane = c.lane AND l.type = c.type AND l.epoch = c.e;
END $$;
