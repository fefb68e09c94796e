-- The hot path's reads start where the live work starts (docs/queue.md#a-shared-database).
--
-- A lane's head_at is never later than its oldest pending job: a job that becomes pending
-- moves it back in the same statement, and one that leaves moves it on only here, once
-- the new head is found. Everything in jobs_claim_idx before it is a job that already
-- left, whose entry stays while any snapshot older than its leaving is open (a report, a
-- pg_dump). Probes that started at the lane's first entry walked all of those: under a
-- held snapshot, every claim and every new head cost more than the last. They now start
-- at head_at.

CREATE OR REPLACE FUNCTION job_lanes_apply(types text[], lane_ids uuid[], pending_d integer[],
                                served_d integer[], in_head timestamptz[], in_ready timestamptz[],
                                out_head timestamptz[], out_ready timestamptz[], may_create boolean)
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
    SET (pending, served, head_at, ready_at) = (
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
                    ELSE least(l.ready_at, c.ir) END
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
