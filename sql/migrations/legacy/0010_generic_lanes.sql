-- Lanes are the queue's own concept. Every job belongs to one (jobs.lane: its
-- campaign_id, or the all-zero uuid for ownerless work) and a lane carries what the fair
-- claim ranks it by: `priority` and `paused`. Whoever owns the lanes (a plug-in's
-- triggers, an operator in psql) sets them on `lanes`; the triggers below copy them onto
-- the lane's job_lanes rows (one per job type), next to the counters, where one index
-- holds the lanes with work in claim order. A claim reads the first few entries of that
-- index, however many lanes exist.

CREATE TABLE lanes (
    id        uuid PRIMARY KEY,
    owner_id  uuid REFERENCES users (id) ON DELETE SET NULL,  -- whose work it is, if anyone's
    priority  integer NOT NULL DEFAULT 0,      -- higher is claimed first; 0 for a lane nobody ranked
    paused    boolean NOT NULL DEFAULT false   -- nothing of a paused lane is claimed, stale leases included
);
CREATE INDEX lanes_owner_idx ON lanes (owner_id) WHERE owner_id IS NOT NULL;

-- The lane's ranking, copied; and where its queue starts, so a claim can order lanes by
-- their oldest job and pass over lanes whose work is all deferred without probing jobs:
--   head_at:  created_at of the lane's oldest pending job;
--   ready_at: the lane has a job ready now exactly when ready_at <= now(). It is the run_after
--             of some pending job, no earlier than the earliest: that earliest one itself
--             whenever it lies in the future (the lane's wake-up time), otherwise any
--             pending job already due when the row was written (time only moves on, so
--             it stays due until it leaves, and then the row is written again).
--   Both NULL when nothing is pending.
ALTER TABLE job_lanes
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN paused   boolean NOT NULL DEFAULT false,
    ADD COLUMN head_at  timestamptz,
    ADD COLUMN ready_at timestamptz;
-- Keyed by lane first, so a ranking change finds a lane's rows of every type. (The
-- counters are indexed now, so their updates are no longer HOT: the price of reading
-- lanes in order. The table stays one small row per lane and type.)
ALTER TABLE job_lanes DROP CONSTRAINT job_lanes_pkey, ADD PRIMARY KEY (lane, type);

-- The claim order: priority, least served, oldest job. ready_at is the last key only so
-- that `ready_at <= now()` is checked on the index entry itself: a lane whose work is
-- all deferred costs the walk one entry, no heap visit and no probe of jobs.
CREATE INDEX job_lanes_claim_idx ON job_lanes (type, priority DESC, served, head_at, ready_at)
    WHERE pending > 0 AND NOT paused;

-- A lane's earliest pending run_after, read when its earliest job leaves (jobs_claim_idx
-- gives the oldest created_at the same way).
--
-- Both without deduplication: a lane's jobs enqueued by one statement share their
-- created_at and run_after, so deduplication packs them into posting lists, and a
-- posting list's entries of jobs already claimed cannot be marked dead one by one. Every
-- probe of the lane's head then visits each of those jobs again, until VACUUM. Entry by
-- entry, the first probe that finds one dead marks it, and later probes step over it.
CREATE INDEX jobs_wake_idx ON jobs (type, lane, run_after) WITH (deduplicate_items = off)
    WHERE status = 'pending';
ALTER INDEX jobs_claim_idx SET (deduplicate_items = off);
REINDEX INDEX jobs_claim_idx;

-- Every lane with jobs or counters has its row; job_lanes learns where each queue starts.
INSERT INTO lanes (id)
SELECT lane FROM job_lanes
UNION
SELECT lane FROM jobs WHERE status IN ('pending', 'running')
ON CONFLICT (id) DO NOTHING;
UPDATE job_lanes l
SET head_at = (SELECT min(j.created_at) FROM jobs j
               WHERE j.status = 'pending' AND j.type = l.type AND j.lane = l.lane),
    ready_at = (SELECT min(j.run_after) FROM jobs j
                WHERE j.status = 'pending' AND j.type = l.type AND j.lane = l.lane);

-- Apply per-(type, lane) changes to job_lanes. One array element per (type, lane), in
-- (type, lane) order: the pending and served deltas; the oldest created_at and earliest
-- run_after among jobs that became pending (in_head, in_ready) and among jobs that
-- stopped being pending (out_head, out_ready). may_create: some (type, lane) may have no
-- row yet (jobs became pending, or an attempt started elsewhere than from pending); a
-- claim's lanes had pending jobs, so their rows exist. Called by the jobs triggers only.
CREATE FUNCTION job_lanes_apply(types text[], lane_ids uuid[], pending_d integer[],
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
            ORDER BY j.created_at LIMIT 1
        ) h ON true)
    FROM unnest(types, lane_ids, pending_d, served_d, in_head, in_ready, out_head, out_ready)
         AS c(type, lane, p, s, ih, ir, oh, orr)
    WHERE l.lane = c.lane AND l.type = c.type;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_apply(text[], uuid[], integer[], integer[], timestamptz[],
                                           timestamptz[], timestamptz[], timestamptz[], boolean)
    FROM PUBLIC;

-- The jobs triggers, as before one statement-level call per statement, now through
-- job_lanes_apply. SECURITY DEFINER: the API's role fires them but has no rights on
-- the counters.
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
        PERFORM job_lanes_apply(a_type, a_lane, a_pending, a_zero, a_head, a_ready, a_none, a_none, true);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION jobs_lanes_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_type text[]; a_lane uuid[]; a_pending integer[]; a_served integer[];
    a_in_head timestamptz[]; a_in_ready timestamptz[]; a_out_head timestamptz[]; a_out_ready timestamptz[];
    a_may_create boolean;
BEGIN
    -- Completions and failures (nothing was or becomes pending, no attempt starts):
    -- nothing to count.
    IF NOT EXISTS (SELECT 1 FROM old_jobs WHERE status = 'pending')
       AND NOT EXISTS (SELECT 1 FROM new_jobs WHERE status IN ('pending', 'running')) THEN
        RETURN NULL;
    END IF;
    WITH pair AS (  -- each row's old and new version (a job's id never changes)
        SELECT o.type AS o_type, o.lane AS o_lane, o.created_at AS o_created, o.run_after AS o_run_after,
               n.type, n.lane, n.created_at, n.run_after,
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
    )
    SELECT array_agg(type), array_agg(lane), array_agg(p), array_agg(s),
           array_agg(ih), array_agg(ir), array_agg(oh), array_agg(orr),
           bool_or(ih IS NOT NULL OR (s > 0 AND oh IS NULL))
    INTO a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready, a_out_head, a_out_ready,
         a_may_create
    FROM (SELECT * FROM per_lane ORDER BY type, lane) sorted;
    IF a_type IS NULL THEN
        RETURN NULL;  -- nothing the counters track changed (e.g. progress on a running job)
    END IF;
    PERFORM job_lanes_apply(a_type, a_lane, a_pending, a_served, a_in_head, a_in_ready,
                            a_out_head, a_out_ready, a_may_create);
    INSERT INTO job_lane_hours AS h (type, lane, hour, served)
    SELECT c.type, c.lane, date_trunc('hour', now()), c.n
    FROM unnest(a_type, a_lane, a_served) AS c(type, lane, n)
    WHERE c.n <> 0
    ORDER BY c.type, c.lane
    ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served;
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
        PERFORM job_lanes_apply(a_type, a_lane, a_pending, a_zero, a_none, a_none, a_head, a_ready, false);
    END IF;
    RETURN NULL;
END $$;

-- A lane's ranking changed: copy it onto its job_lanes rows (locked in the jobs
-- triggers' order, so a claim running at the same time cannot deadlock with it).
CREATE FUNCTION lanes_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM job_lanes l JOIN new_lanes n ON n.id = l.lane
    WHERE (l.priority, l.paused) IS DISTINCT FROM (n.priority, n.paused)
    ORDER BY l.type, l.lane
    FOR NO KEY UPDATE OF l;
    UPDATE job_lanes l SET priority = n.priority, paused = n.paused
    FROM new_lanes n
    WHERE l.lane = n.id AND (l.priority, l.paused) IS DISTINCT FROM (n.priority, n.paused);
    RETURN NULL;
END $$;
CREATE TRIGGER lanes_ranking AFTER UPDATE ON lanes
    REFERENCING NEW TABLE AS new_lanes FOR EACH STATEMENT EXECUTE FUNCTION lanes_after_update();
