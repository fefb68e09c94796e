-- Claim up to :limit jobs of :type for run :run_id when the stage's limits hold per key
-- (Stage.limit_by): no key gets more than its room, and the jobs of keys with no room are
-- passed over, so the other keys' work is claimed. Run only by the holder of the type's
-- claim turn (claim_limit_turn.sql), so the counts below are every committed claim's.
--
-- A key's room: :concurrency less its jobs held on a live lease, and :rate less its starts
-- of the last :window_seconds (stage_starts); a limit given as NULL does not apply. The
-- key is job_limit_key(lane, payload, :by_lane, :path).
--
-- The order is the claim's (claim.sql), simplified for a claim that is never contended
-- (the turn serialises them): the lanes in claim order, each lane's first ready jobs of
-- keys with room (by their own priority, then age), then by lane priority, the lane's
-- served count + its k-th job, age.
-- Ready jobs come from the first 40 × :limit lanes, each lane's first :limit of keys with
-- room; stale ones (their holder died: lease expired, attempts left) come first in their
-- lane and key. A key whose backlog crowds a lane's first :limit leaves this claim fuller
-- of it than its room allows, so the claim takes fewer; the next one, the key at its limit,
-- passes its jobs over.
WITH held AS (
    SELECT job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) AS key, count(*) AS n
    FROM jobs j
    WHERE j.type = :type AND j.status = 'running'
      AND j.locked_at >= now() - make_interval(secs => :lease_seconds)
    GROUP BY 1
), started AS (
    SELECT s.key, count(*) AS n
    FROM stage_starts s
    WHERE s.type = :type AND s.started_at > clock_timestamp() - make_interval(secs => :window_seconds)
    GROUP BY s.key
), rooms AS (
    SELECT k.key, least(:concurrency::int - coalesce(h.n, 0), :rate::int - coalesce(s.n, 0)) AS room
    FROM (SELECT key FROM held UNION SELECT key FROM started) k
    LEFT JOIN held h ON h.key = k.key
    LEFT JOIN started s ON s.key = k.key
), lanes_in_order AS (
    SELECT l.lane, l.priority, coalesce(l.head_at, '-infinity') AS live_from,
           l.served + coalesce((SELECT sum(n.served) FROM job_lane_journal n
                                WHERE n.type = l.type AND n.lane = l.lane
                                  AND n.xid >= mark_or_start(l.journal_from)), 0) AS served
    FROM job_lanes l
    WHERE l.epoch = job_lane_epoch() AND l.type = :type AND l.pending > 0 AND NOT l.paused
      AND l.ready_at <= now()
      AND NOT EXISTS (SELECT 1 FROM paused_stages p WHERE p.type = :type)
    ORDER BY l.priority DESC, l.served, l.head_at
    LIMIT 40 * :limit
), ready AS (
    SELECT r.id, r.key, l.lane, l.priority, l.served, r.job_priority, r.created_at,
           -- ties between lanes by the age of their work, as if no job were ranked (claim.sql)
           CASE WHEN r.job_priority = 0 THEN r.created_at ELSE least(r.created_at, l.live_from) END AS tie_at,
           false AS stale
    FROM lanes_in_order l
    CROSS JOIN LATERAL (
        -- the lane's first :limit ready jobs of keys with room, by their own priority then
        -- age: ranked above 0, of priority 0, ranked below 0 (claim.sql's probe)
        SELECT * FROM (
            SELECT j.id, job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) AS key, j.priority AS job_priority,
                   j.created_at
            FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority > 0
              AND (j.run_after <= now()) IS TRUE
              AND job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) <> ALL (ARRAY(SELECT key FROM rooms WHERE room <= 0))
            ORDER BY j.priority DESC, j.created_at
            LIMIT :limit
            FOR UPDATE SKIP LOCKED) up
        UNION ALL
        SELECT * FROM (
            SELECT j.id, job_limit_key(j.lane, j.payload, :by_lane, :path::text[]), j.priority, j.created_at
            FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority = 0
              AND (j.run_after <= now()) IS TRUE AND j.created_at >= l.live_from
              AND job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) <> ALL (ARRAY(SELECT key FROM rooms WHERE room <= 0))
            ORDER BY j.created_at
            LIMIT :limit
            FOR UPDATE SKIP LOCKED) plain
        UNION ALL
        SELECT * FROM (
            SELECT j.id, job_limit_key(j.lane, j.payload, :by_lane, :path::text[]), j.priority, j.created_at
            FROM jobs j
            WHERE j.status = 'pending' AND j.type = :type AND j.lane = l.lane AND j.priority < 0
              AND (j.run_after <= now()) IS TRUE
              AND job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) <> ALL (ARRAY(SELECT key FROM rooms WHERE room <= 0))
            ORDER BY j.priority DESC, j.created_at
            LIMIT :limit
            FOR UPDATE SKIP LOCKED) down
        LIMIT :limit
    ) r
), stale AS (
    SELECT j.id, job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) AS key, j.lane,
           coalesce(r.priority, 0) AS priority, coalesce(l.served, 0) AS served, j.priority AS job_priority,
           j.created_at, j.created_at AS tie_at, true AS stale
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
      AND j.run_id IS DISTINCT FROM :run_id  -- never this run's own (claim.sql says why)
      AND job_limit_key(j.lane, j.payload, :by_lane, :path::text[]) <> ALL (ARRAY(SELECT key FROM rooms WHERE room <= 0))
    ORDER BY priority DESC, served, j.created_at
    LIMIT :limit
    FOR UPDATE OF j SKIP LOCKED
), candidates AS (
    SELECT * FROM ready
    UNION ALL
    SELECT * FROM stale
), within_room AS (
    -- each key's first jobs in claim order (its stale ones first, as in a lane), as many
    -- as its room
    SELECT c.*
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.key
                                         ORDER BY c.stale DESC, c.priority DESC, c.served, c.job_priority DESC,
                                                  c.created_at) AS nth
          FROM candidates c) c
    LEFT JOIN rooms r ON r.key = c.key
    WHERE c.nth <= coalesce(r.room, least(:concurrency::int, :rate::int))
), picked AS (
    SELECT w.id
    FROM (SELECT w.id, w.priority, w.tie_at,
                 w.served + row_number() OVER (PARTITION BY w.lane
                                               ORDER BY w.stale DESC, w.job_priority DESC, w.created_at) AS weight
          FROM within_room w) w
    ORDER BY w.priority DESC, w.weight, w.tie_at
    LIMIT :limit
), folded AS (
    -- the lane journal folded into the next epoch, when the current one is a second old
    SELECT job_lanes_fold_if_due() AS folded
), claimed AS (
    UPDATE jobs
    -- locked when written, not when the transaction began: job_running_floor counts on it
    SET status = 'running', locked_at = clock_timestamp(), attempts = jobs.attempts + 1, run_id = :run_id
    WHERE jobs.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING jobs.id, jobs.type, jobs.payload, jobs.attempts, jobs.lane, jobs.run_id, jobs.batch_id,
              jobs.dedupe_key, jobs.created_at, jobs.trace_context, jobs.priority,
              job_limit_key(jobs.lane, jobs.payload, :by_lane, :path::text[]) AS limit_key
)
SELECT c.* FROM claimed c, folded ORDER BY c.created_at, c.id
