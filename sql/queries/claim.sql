-- Claim up to $2 jobs of type $1 for run $3, fairly. One statement, one transaction.
-- $4: the stage's lease in seconds, $5: its max attempts.
--
-- Order (DESIGN.md invariant 4): plan priority, then the lane (campaign) served least
-- in the last day, then oldest. "Served" comes from the job_lanes counters, so the
-- claim reads one small row per lane with work and never the done history.
-- Within one claim a lane's k-th job counts as served + k: claiming 25 at once
-- interleaves campaigns exactly as 25 claims of one would.
-- {priority} is the CASE expression generated from PLANS (app/outreach/plans.py).
WITH stale AS (
    -- jobs whose holder died: lease expired, attempts left
    SELECT j.id
    FROM jobs j
    LEFT JOIN campaigns ON campaigns.id = j.campaign_id
    WHERE j.type = $1 AND j.status = 'running'
      AND j.locked_at < now() - make_interval(secs => $4)
      AND j.attempts < $5
      AND (j.campaign_id IS NULL OR campaigns.status = 'active')
    ORDER BY j.locked_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
), wanted AS (
    SELECT greatest($2 - (SELECT count(*) FROM stale), 0) AS n
), ranked AS (
    -- lanes with waiting jobs, best first
    SELECT l.lane, l.pending, l.served, {priority} AS priority
    FROM job_lanes l
    LEFT JOIN campaigns ON campaigns.id = l.lane
    LEFT JOIN subscriptions ON subscriptions.user_id = campaigns.user_id
    WHERE l.type = $1 AND l.pending > 0
      AND (campaigns.id IS NULL OR campaigns.status = 'active')
    ORDER BY priority DESC, l.served
    OFFSET 0
), heads AS (
    -- the first lanes, in that order, that have a job ready now and not held by another
    -- claim (a probe of the claim index). SKIP LOCKED here too, or a lane whose ready
    -- jobs another claim is taking would get a quota it cannot fill, and a claim could
    -- come back empty while other lanes have work. The probe's lock is on the lane's
    -- oldest ready job, the first one `fair` then takes; at most one per lane is held
    -- needlessly, and only until this statement commits.
    SELECT r.lane, r.pending, r.served, r.priority, h.created_at AS head_at
    FROM ranked r
    CROSS JOIN LATERAL (
        SELECT j.created_at FROM jobs j
        WHERE j.status = 'pending' AND j.type = $1 AND j.lane = r.lane AND j.run_after <= now()
        ORDER BY j.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) h
    ORDER BY r.priority DESC, r.served
    LIMIT (SELECT n FROM wanted)
), slots AS (
    -- the lane's k-th job weighs served + k; take the lightest
    SELECT h.lane
    FROM heads h
    CROSS JOIN LATERAL generate_series(1, least(h.pending, $2)) AS k
    ORDER BY h.priority DESC, h.served + k, h.head_at
    LIMIT (SELECT n FROM wanted)
), quota AS (
    SELECT lane, count(*) AS n FROM slots GROUP BY lane
), fair AS (
    -- lock exactly each lane's quota, oldest first, skipping rows another claim holds
    SELECT j.id
    FROM quota q
    CROSS JOIN LATERAL (
        SELECT j.id FROM jobs j
        WHERE j.status = 'pending' AND j.type = $1 AND j.lane = q.lane AND j.run_after <= now()
        ORDER BY j.created_at
        LIMIT q.n
        FOR UPDATE SKIP LOCKED
    ) j
), picked AS (
    SELECT id FROM stale
    UNION ALL
    SELECT id FROM fair
)
UPDATE jobs
SET status = 'running', locked_at = now(), attempts = jobs.attempts + 1, run_id = $3
-- an id array, not a join: the planner cannot know `picked` is small and would
-- otherwise hash-join it against the whole table, done history included
WHERE jobs.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING jobs.id, jobs.type, jobs.payload, jobs.attempts, jobs.campaign_id, jobs.run_id, jobs.batch_id,
          jobs.dedupe_key, jobs.created_at
