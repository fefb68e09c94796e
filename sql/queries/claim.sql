-- Claim up to :limit jobs of type :type for run :run_id, fairly. One statement, one transaction.
-- :lease_seconds: the stage's lease in seconds, :max_attempts: its max attempts.
--
-- The same statement first writes how run :run_id's previous batch ended, so the hot loop
-- pays one round trip per batch: :done the jobs it finished (done), :hand_back those it hands back
-- (pending again from :hand_back_until, the attempt the claim counted returned: nothing was tried).
-- Either only touches jobs run :run_id still holds. Plain claims pass empty arrays. The
-- result is one row per claimed job, oldest first, or a single row of NULL job columns
-- when none was claimed; every row carries how many jobs were marked done and handed back.
--
-- Reads jobs, the lane rows and their journal lines. Order: the lane's priority (highest
-- first), then the lane served least in the last day, then the oldest ready job. Inside a
-- lane its jobs go by their own priority (highest first), then oldest: each probe of a lane
-- reads jobs_claim_ranked_idx for jobs ranked above 0, then jobs_claim_idx (priority 0),
-- then the ranked ones below 0, and stops when it has what it needs (migration 0058). Within
-- one claim a lane's k-th job counts as served + k: claiming 25 at once interleaves lanes
-- exactly as 25 claims of one would. The lanes come off job_lanes_claim_idx in that order
-- as the last fold wrote it (docs/shared-database.md), so a claim of n reads
-- about 4n + 32 lane rows however many lanes exist or have work. When the current epoch
-- is a second old, the claim first folds the journal into the next (folded).
--
-- Every probe of jobs_claim_idx starts at the lane's head_at (live_from), never later
-- than its oldest pending job: the entries before it are jobs that left, kept while any
-- older snapshot is open, and a probe from the lane's first entry would walk them all.
--
-- The probes test readiness through an expression, (run_after <= now()) IS TRUE, so that
-- jobs_claim_idx is the one index that serves them: given the comparison, the planner could
-- walk jobs_wake_idx or jobs_due_idx (type, run_after), every ready job of the type filtered
-- by lane, and under some statistics it did (0.5 s a claim). The expression proves nothing
-- about NULLs, and jobs_due_idx asks run_after IS NOT NULL (migration 0057): out of reach.
--
-- The endings test the status through an expression, (status || ''), not the column:
-- the ids are few and exact, and the primary key finds them. Given the column, the
-- planner (whose statistics, taken with nothing running, say no job runs) scans
-- jobs_running_idx instead: every run's running jobs, each fetched from the heap, about
-- 20 rows per job finished with ten runs at once.
WITH done AS (
    UPDATE jobs SET status = 'done', finished_at = now()
    WHERE id = ANY (:done::uuid[]) AND run_id = :run_id AND (status || '') = 'running'
    RETURNING id
), handed_back AS (
    UPDATE jobs j
    SET status = 'pending', locked_at = NULL, run_after = d.until, attempts = greatest(j.attempts - 1, 0)
    FROM unnest(:hand_back::uuid[], :hand_back_until::timestamptz[]) AS d(id, until)
    WHERE j.id = d.id AND j.run_id = :run_id AND (j.status || '') = 'running'
    RETURNING j.id
), stale AS (
    -- jobs whose holder died: lease expired, attempts left, lane not paused. They
    -- compete for the slots below like the ready jobs of their lane (their first attempt
    -- still counts in `served`). Few: only what dead workers left behind.
    SELECT j.id, j.lane, j.created_at, coalesce(r.priority, 0) AS priority,
           coalesce(l.served, 0) AS served
    FROM jobs j
    LEFT JOIN lanes r ON r.id = j.lane
    LEFT JOIN LATERAL (SELECT l.served FROM job_lanes l WHERE l.lane = j.lane AND l.type = j.type
                       ORDER BY l.epoch DESC LIMIT 1) l ON true
    WHERE j.type = :type AND j.status = 'running'
      -- from the type's floor: no running job was locked before it, and the entries before
      -- it are jobs that ended, kept while a snapshot is held (docs/shared-database.md)
      AND j.locked_at >= job_running_floor(:type)
      AND j.locked_at < now() - make_interval(secs => :lease_seconds)
      AND j.attempts < :max_attempts
      AND NOT coalesce(r.paused, false)
      AND NOT EXISTS (SELECT 1 FROM paused_stages p WHERE p.type = :type)
      -- never this run's own: a run that asks is alive, and a batch of its own that waited
      -- past its lease (prefetched, or held by its other claim stream) is still going to
      -- run. Taken back by the same run, it would run twice, and the writes of one copy,
      -- guarded by the run's id only, would land on the other (a hand-back returning the
      -- attempt the other copy is on).
      AND j.run_id IS DISTINCT FROM :run_id
      -- two writes to one row in one statement: only one would happen
      AND j.id <> ALL (:done::uuid[]) AND j.id <> ALL (:hand_back::uuid[])
    ORDER BY priority DESC, served, j.created_at
    LIMIT :limit
    FOR UPDATE OF j SKIP LOCKED
), heads AS (
    -- the first lanes in claim order that have a job ready now and not held by another
    -- claim. The index walk passes over lanes whose work is all deferred (ready_at) on
    -- the index entry alone; the probe of jobs_claim_idx finds the lane's oldest ready
    -- job. SKIP LOCKED there too, or a lane whose ready jobs another claim is taking
    -- would get a quota it cannot fill, and a claim could come back empty while other
    -- lanes have work. The probe's lock is on the lane's oldest ready job, the first one
    -- `fair` then takes; at most one per lane is held needlessly, and only until this
    -- statement commits. (The index orders tied lanes by their oldest pending job,
    -- which is their oldest ready one unless the lane holds a deferred job older than its
    -- ready work, e.g. a retry waiting out its backoff; `slots` uses the probe's head.)
    --
    -- The lanes are put in order inside a subquery of their own (`l` below) and probed
    -- outside it, with no ORDER BY over the probes: planned any way at all, the probes run in
    -- the lanes' order and stop at the :limit-th lane found free, so a claim locks at most
    -- :limit heads. Sorted after probing, it would probe and lock every lane's head, and a
    -- claim beside it would find none free. The order: the current epoch's lanes come off
    -- job_lanes_claim_idx as the last fold left their counts; the first 4 × :limit + 32 are
    -- weighed with the journal's lines since (the claims since the fold) and sorted by that,
    -- then the next ones follow in the fold's order, read only if the first cannot fill the
    -- claim. The bound of 40 × :limit lanes: a probe that finds a lane held locks nothing,
    -- and another claim holds at most 2 × :limit jobs, so 40 × :limit lanes leave this claim
    -- :limit free ones unless about 20 claims of its size overlap on the same lanes.
    SELECT l.lane, l.pending, l.served, l.priority,
           -- how old the lane's work is, for ties between lanes: a job's own priority leaves
           -- that as it was (a ranked head is the oldest only as far as the fold's head says)
           CASE WHEN h.priority = 0 THEN h.created_at ELSE least(h.created_at, l.live_from) END AS head_at,
           h.id AS head_id, l.live_from,
           -- the lane's stale jobs come first in its order: counted once here, not for
           -- each of the lane's slots below (up to :limit each)
           (SELECT count(*) FROM stale s WHERE s.lane = l.lane) AS stale_n
    FROM (
        -- the epoch's first 4 × :limit + 32 lanes, each counted with the journal's lines since
        -- its row was written (what claims since the last fold took, what enqueues added),
        -- put in order by those counts before any is probed (OFFSET 0: sorted here)
        SELECT * FROM (
            SELECT w.lane, w.priority, w.live_from,
                   -- the probe below finds a head: at least one is waiting
                   greatest(w.pending + j.pending, 1) AS pending, w.served + j.served AS served
            FROM (
                SELECT l.type, l.lane, l.pending, l.served, l.priority, l.journal_from,
                       coalesce(l.head_at, '-infinity') AS live_from
                FROM job_lanes l
                WHERE l.epoch = job_lane_epoch() AND l.type = :type AND l.pending > 0 AND NOT l.paused
                  AND l.ready_at <= now()
                  -- nothing of a stage an operator paused (one probe of a table people write)
                  AND NOT EXISTS (SELECT 1 FROM paused_stages p WHERE p.type = :type)
                ORDER BY l.priority DESC, l.served, l.head_at
                LIMIT 4 * :limit + 32
            ) w
            CROSS JOIN LATERAL (
                SELECT coalesce(sum(n.pending), 0) AS pending, coalesce(sum(n.served), 0) AS served
                FROM job_lane_journal n
                WHERE n.type = w.type AND n.lane = w.lane AND n.xid >= mark_or_start(w.journal_from)
            ) j
            ORDER BY w.priority DESC, w.served + j.served, w.live_from
            OFFSET 0
        ) first_lanes
        UNION ALL
        -- then, only if those could not fill the claim, the next ones in the fold's order
        SELECT w.lane, w.priority, w.live_from, greatest(w.pending + j.pending, 1), w.served + j.served
        FROM (
            SELECT l.type, l.lane, l.pending, l.served, l.priority, l.journal_from,
                   coalesce(l.head_at, '-infinity') AS live_from
            FROM job_lanes l
            WHERE l.epoch = job_lane_epoch() AND l.type = :type AND l.pending > 0 AND NOT l.paused
              AND l.ready_at <= now()
              AND NOT EXISTS (SELECT 1 FROM paused_stages p WHERE p.type = :type)
            ORDER BY l.priority DESC, l.served, l.head_at
            OFFSET 4 * :limit + 32
            LIMIT 36 * :limit - 32
        ) w
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(n.pending), 0) AS pending, coalesce(sum(n.served), 0) AS served
            FROM job_lane_journal n
            WHERE n.type = w.type AND n.lane = w.lane AND n.xid >= mark_or_start(w.journal_from)
        ) j
    ) l
    CROSS JOIN LATERAL (
        -- the lane's first ready job: ranked above 0, else of priority 0, else ranked below
        SELECT * FROM (
            SELECT j.id, j.created_at, j.priority FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority > 0
              AND (j.run_after <= now()) IS TRUE
            ORDER BY j.priority DESC, j.created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED) up
        UNION ALL
        SELECT * FROM (
            SELECT j.id, j.created_at, j.priority FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority = 0
              AND (j.run_after <= now()) IS TRUE AND j.created_at >= l.live_from
            ORDER BY j.created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED) plain
        UNION ALL
        SELECT * FROM (
            SELECT j.id, j.created_at, j.priority FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority < 0
              AND (j.run_after <= now()) IS TRUE
            ORDER BY j.priority DESC, j.created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED) down
        LIMIT 1
    ) h
    LIMIT :limit
), last_first AS (
    -- the last of the heads' first slots in claim order: the lowest priority among them,
    -- and the heaviest first slot at that priority. When :limit lanes have a head, the :limit
    -- first slots already fill the claim up to it, so no slot that sorts after it can
    -- win: a lane at that priority needs only the slots as light as it (a mixed claim of
    -- 25 generates about 40 slots, not 600).
    SELECT count(*) AS lanes, min(priority) AS priority,
           max(served + stale_n + 1) FILTER (WHERE priority = (SELECT min(priority) FROM heads)) AS weight
    FROM heads
), slots AS (
    -- every claimable job weighs its lane's served + k, k its place in the lane (a
    -- lane's stale jobs first); the lightest :limit win, ties to the oldest job
    SELECT s.lane, s.id, s.priority,
           s.served + row_number() OVER (PARTITION BY s.lane ORDER BY s.created_at) AS weight,
           s.created_at AS at
    FROM stale s
    UNION ALL
    SELECT h.lane, NULL, h.priority,
           h.served + h.stale_n + k,
           h.head_at
    FROM heads h
    CROSS JOIN last_first f
    CROSS JOIN LATERAL generate_series(1, CASE WHEN f.lanes < :limit OR h.priority > f.priority
                                               THEN least(h.pending, :limit)
                                               ELSE least(h.pending, :limit, f.weight - h.served - h.stale_n) END) AS k
    ORDER BY priority DESC, weight, at
    LIMIT :limit
), quota AS (
    SELECT s.lane, count(*) AS n, min(h.live_from) AS live_from
    FROM slots s JOIN heads h ON h.lane = s.lane
    WHERE s.id IS NULL GROUP BY s.lane
), fair AS (
    -- lock exactly each lane's quota, oldest first, skipping rows another claim holds. A
    -- quota of one is the head `heads` already locked: no second probe
    SELECT h.head_id AS id
    FROM quota q JOIN heads h ON h.lane = q.lane
    WHERE q.n = 1
    UNION ALL
    SELECT j.id
    FROM quota q
    CROSS JOIN LATERAL (
        -- the lane's first q.n ready jobs, in the order of the head's probe
        SELECT * FROM (
            SELECT j.id FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = q.lane AND j.priority > 0
              AND (j.run_after <= now()) IS TRUE
            ORDER BY j.priority DESC, j.created_at
            LIMIT q.n
            FOR UPDATE SKIP LOCKED) up
        UNION ALL
        SELECT * FROM (
            SELECT j.id FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = q.lane AND j.priority = 0
              AND (j.run_after <= now()) IS TRUE AND j.created_at >= q.live_from
            ORDER BY j.created_at
            LIMIT q.n
            FOR UPDATE SKIP LOCKED) plain
        UNION ALL
        SELECT * FROM (
            SELECT j.id FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = q.lane AND j.priority < 0
              AND (j.run_after <= now()) IS TRUE
            ORDER BY j.priority DESC, j.created_at
            LIMIT q.n
            FOR UPDATE SKIP LOCKED) down
        LIMIT q.n
    ) j
    WHERE q.n > 1
), fair_picked AS (
    SELECT id FROM slots WHERE id IS NOT NULL
    UNION ALL
    SELECT id FROM fair
), refill AS (
    -- a lane's quota counts its pending jobs, and some of them may not be claimable now
    -- (deferred behind its ready ones, or taken by a claim since this one's snapshot):
    -- what `slots` and `fair` could not fill goes to the stale jobs that lost their slot
    -- (already locked), then to the heads' other ready jobs, lanes in claim order, so a
    -- claim is as full as the free work allows. Its LIMIT is 0 when the claim is full, and
    -- a LIMIT of 0 runs nothing below it; it locks only what it takes (no ORDER BY over
    -- the probes, as in heads).
    SELECT x.id
    FROM (
        SELECT s.id FROM stale s WHERE s.id <> ALL (ARRAY(SELECT id FROM fair_picked))
        UNION ALL
        SELECT r.id
        FROM (SELECT h.lane, h.live_from FROM heads h ORDER BY h.priority DESC, h.served, h.head_at) h
        CROSS JOIN LATERAL (
            -- this claim's own locks do not make it skip: what it took is left out by id
            SELECT * FROM (
                SELECT j.id FROM jobs j
                WHERE j.status = 'pending' AND j.type = :type AND j.lane = h.lane AND j.priority > 0
                  AND (j.run_after <= now()) IS TRUE AND j.id <> ALL (ARRAY(SELECT id FROM fair))
                ORDER BY j.priority DESC, j.created_at
                LIMIT :limit
                FOR UPDATE SKIP LOCKED) up
            UNION ALL
            SELECT * FROM (
                SELECT j.id FROM jobs j
                WHERE j.status = 'pending' AND j.type = :type AND j.lane = h.lane AND j.priority = 0
                  AND (j.run_after <= now()) IS TRUE AND j.created_at >= h.live_from
                  AND j.id <> ALL (ARRAY(SELECT id FROM fair))
                ORDER BY j.created_at
                LIMIT :limit
                FOR UPDATE SKIP LOCKED) plain
            UNION ALL
            SELECT * FROM (
                SELECT j.id FROM jobs j
                WHERE j.status = 'pending' AND j.type = :type AND j.lane = h.lane AND j.priority < 0
                  AND (j.run_after <= now()) IS TRUE AND j.id <> ALL (ARRAY(SELECT id FROM fair))
                ORDER BY j.priority DESC, j.created_at
                LIMIT :limit
                FOR UPDATE SKIP LOCKED) down
            LIMIT :limit
        ) r
    ) x
    LIMIT greatest(:limit - (SELECT count(*) FROM fair_picked), 0)
), picked AS (
    SELECT id FROM fair_picked
    UNION ALL
    SELECT id FROM refill
), folded AS (
    -- the lane journal folded into the next epoch, when the current one is a second old
    SELECT job_lanes_fold_if_due() AS folded
), claimed AS (
    UPDATE jobs
    -- locked when written, not when the transaction began: job_running_floor counts on it
    SET status = 'running', locked_at = clock_timestamp(), attempts = jobs.attempts + 1, run_id = :run_id
    -- an id array, not a join: the planner cannot know `picked` is small and would
    -- otherwise hash-join it against the whole table, done history included
    WHERE jobs.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING jobs.id, jobs.type, jobs.payload, jobs.attempts, jobs.lane, jobs.run_id, jobs.batch_id,
              jobs.dedupe_key, jobs.created_at, jobs.trace_context, jobs.priority
)
SELECT c.*, w.done, w.handed_back
FROM (SELECT (SELECT count(*) FROM done) AS done, (SELECT count(*) FROM handed_back) AS handed_back
      FROM folded) w
LEFT JOIN claimed c ON true
-- the batch in a known order (RETURNING's follows the plan): the lanes chose the jobs,
-- the handlers start them oldest first
ORDER BY c.created_at, c.id
