-- Skiplock schema: accounts, campaigns, the jobs queue, its fairness counters, and runs.

CREATE TABLE users (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email       text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A user's plan. The plans themselves (priority, allowances) live in app/outreach/plans.py.
CREATE TABLE subscriptions (
    user_id     uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    plan        text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE campaigns (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid REFERENCES users (id) ON DELETE CASCADE,
    name        text NOT NULL DEFAULT '',
    url         text,
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaigns_user_idx ON campaigns (user_id);

-- One row per pipeline invocation: why it stopped and what it did.
CREATE TABLE runs (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    trigger        text NOT NULL,
    stop_reason    text CHECK (stop_reason IN
                       ('no_work', 'time_budget', 'quota_reserve', 'quota_exhausted', 'error')),
    jobs_done      integer NOT NULL DEFAULT 0,
    jobs_failed    integer NOT NULL DEFAULT 0,
    jobs_deferred  integer NOT NULL DEFAULT 0,
    quota_units    integer NOT NULL DEFAULT 0,
    summary        jsonb NOT NULL DEFAULT '{}',
    error          text,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
CREATE INDEX runs_started_idx ON runs (started_at DESC, id DESC);
CREATE INDEX runs_unfinished_idx ON runs (started_at) WHERE finished_at IS NULL;

-- The queue. Every claim, completion, failure and deferral rewrites a row, so:
-- fillfactor 70 leaves room on each page for the new row version, so the rewrite
-- usually stays on the same page instead of extending the table; autovacuum runs
-- after 1% of rows changed (not the default 20%) and without cost-based sleeping,
-- so dead versions are reclaimed while the table is still small and the claim
-- index does not fill up with entries for rows that are no longer pending.
CREATE TABLE jobs (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    type         text NOT NULL,
    campaign_id  uuid REFERENCES campaigns (id) ON DELETE CASCADE,
    -- The fairness lane: the campaign, or the all-zero uuid for ownerless jobs.
    lane         uuid NOT NULL GENERATED ALWAYS AS
                     (coalesce(campaign_id, '00000000-0000-0000-0000-000000000000'::uuid)) STORED,
    payload      jsonb NOT NULL DEFAULT '{}',
    dedupe_key   text,
    status       text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    run_after    timestamptz NOT NULL DEFAULT now(),
    locked_at    timestamptz,
    last_error   text,
    run_id       uuid REFERENCES runs (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim index: pending jobs of one type and lane, oldest first. Partial, so it
-- holds only the backlog, never the done history.
CREATE INDEX jobs_claim_idx ON jobs (type, lane, created_at) WHERE status = 'pending';
-- Leases: running jobs by age, for reclaiming expired leases and the stuck sweep.
CREATE INDEX jobs_running_idx ON jobs (type, locked_at) WHERE status = 'running';
-- One open job per dedupe key; finished jobs leave the index, so the key can be reused.
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (dedupe_key)
    WHERE status IN ('pending', 'running');

-- Fairness counters, kept up to date by the triggers below so a claim never has to
-- count a day of history. One row per (job type, lane):
--   pending: jobs waiting in the lane (ready now or later);
--   served:  attempts started in the last 24 hours (deferrals give theirs back).
-- Both columns are unindexed, so their updates are HOT; fillfactor leaves room.
CREATE TABLE job_lanes (
    type     text NOT NULL,
    lane     uuid NOT NULL,
    pending  integer NOT NULL DEFAULT 0,
    served   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (type, lane)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

-- The same "served" counts by hour, so that hours older than a day can be
-- subtracted from job_lanes.served (queries/expire_served.sql).
CREATE TABLE job_lane_hours (
    type    text NOT NULL,
    lane    uuid NOT NULL,
    hour    timestamptz NOT NULL,
    served  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (type, lane, hour)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

-- Statement-level triggers with transition tables: one counter update per statement
-- however many jobs it touched, and correct for any SQL (a plain INSERT from psql
-- included). Counter rows are written in (type, lane) order so concurrent
-- statements take their locks in the same order and cannot deadlock.
CREATE FUNCTION jobs_lanes_after_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_lanes AS l (type, lane, pending)
    SELECT type, lane, count(*) FROM new_jobs WHERE status = 'pending'
    GROUP BY type, lane ORDER BY type, lane
    ON CONFLICT (type, lane) DO UPDATE SET pending = l.pending + excluded.pending;
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_lanes_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS (
        SELECT o.type, o.lane, -1 AS pending, 0 AS served FROM old_jobs o WHERE o.status = 'pending'
        UNION ALL
        SELECT n.type, n.lane, 1, 0 FROM new_jobs n WHERE n.status = 'pending'
        UNION ALL
        -- an attempt starts (claim or reclaim): served; a deferral hands it back
        SELECT n.type, n.lane, 0,
               CASE WHEN n.status = 'running' AND (o.status <> 'running' OR n.attempts > o.attempts) THEN 1
                    WHEN o.status = 'running' AND n.status = 'pending' AND n.attempts < o.attempts THEN -1
                    ELSE 0 END
        FROM old_jobs o JOIN new_jobs n ON n.id = o.id
        WHERE n.status IS DISTINCT FROM o.status OR n.attempts <> o.attempts
    ), per_lane AS (
        SELECT type, lane, sum(pending)::int AS pending, sum(served)::int AS served
        FROM d GROUP BY type, lane
        HAVING sum(pending) <> 0 OR sum(served) <> 0
    ), lanes AS (
        INSERT INTO job_lanes AS l (type, lane, pending, served)
        SELECT type, lane, pending, served FROM per_lane ORDER BY type, lane
        ON CONFLICT (type, lane) DO UPDATE
            SET pending = l.pending + excluded.pending, served = l.served + excluded.served
    )
    INSERT INTO job_lane_hours AS h (type, lane, hour, served)
    SELECT type, lane, date_trunc('hour', now()), served FROM per_lane
    WHERE served <> 0 ORDER BY type, lane
    ON CONFLICT (type, lane, hour) DO UPDATE SET served = h.served + excluded.served;
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_lanes_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_lanes l SET pending = l.pending - d.n
    FROM (SELECT type, lane, count(*)::int AS n FROM old_jobs WHERE status = 'pending'
          GROUP BY type, lane ORDER BY type, lane) d
    WHERE l.type = d.type AND l.lane = d.lane;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_lanes_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_insert();
CREATE TRIGGER jobs_lanes_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_update();
CREATE TRIGGER jobs_lanes_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_delete();
