-- The queue's schema, squashed: what the legacy chain (legacy/0001..0012) left, less the
-- outreach example's tables (those are the plug-in's own chain, app/outreach/sql/migrations/).
-- A database made before the split is brought here by legacy/bridge.sql instead.
--
-- Accounts, the jobs queue and its lanes, the fairness counters, runs, batches, recurring
-- ticks, the API's idempotency keys, tenants (API keys, roles, row-level security) and the
-- audit log.

CREATE TABLE users (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email        text NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Where an account's notifications go (else the global WEBHOOK_URL, else nowhere).
    webhook_url  text
);

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

-- Lanes are the queue's own concept. Every job belongs to one (jobs.lane; the all-zero
-- uuid, the default, is the lane of work nobody owns) and a lane carries what the fair
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

-- A batch: a person's request for a set of work in one lane, its jobs' progress summed.
-- Deleting the lane deletes its batches.
CREATE TABLE batches (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    lane         uuid NOT NULL REFERENCES lanes (id) ON DELETE CASCADE,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN
                     ('pending', 'running', 'completed', 'partially_failed', 'failed', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX batches_lane_idx ON batches (lane, created_at DESC);
CREATE INDEX batches_open_idx ON batches (created_at) WHERE status IN ('pending', 'running');

-- The queue. Every claim, completion, failure and deferral rewrites a row, so:
-- fillfactor 70 leaves room on each page for the new row version, so the rewrite
-- usually stays on the same page instead of extending the table; autovacuum runs
-- after 1% of rows changed (not the default 20%) and without cost-based sleeping,
-- so dead versions are reclaimed while the table is still small and the claim
-- index does not fill up with entries for rows that are no longer pending.
CREATE TABLE jobs (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    type         text NOT NULL,
    -- The fairness lane (no foreign key: a job's first insert makes its lane row, see
    -- job_lanes_apply, so any client's plain INSERT lands in the lane it names).
    lane         uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
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
    finished_at  timestamptz,
    batch_id     uuid REFERENCES batches (id) ON DELETE SET NULL,
    total        integer CHECK (total >= 0),     -- expected units of work, for progress bars
    progress     integer CHECK (progress >= 0)   -- units done so far
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim index: pending jobs of one type and lane, oldest first. Partial, so it
-- holds only the backlog, never the done history. The wake index: a lane's earliest
-- pending run_after, read when its earliest job leaves (the claim index gives the oldest
-- created_at the same way).
--
-- Both without deduplication: a lane's jobs enqueued by one statement share their
-- created_at and run_after, so deduplication packs them into posting lists, and a
-- posting list's entries of jobs already claimed cannot be marked dead one by one. Every
-- probe of the lane's head then visits each of those jobs again, until VACUUM. Entry by
-- entry, the first probe that finds one dead marks it, and later probes step over it.
CREATE INDEX jobs_claim_idx ON jobs (type, lane, created_at) WITH (deduplicate_items = off)
    WHERE status = 'pending';
CREATE INDEX jobs_wake_idx ON jobs (type, lane, run_after) WITH (deduplicate_items = off)
    WHERE status = 'pending';
-- Leases: running jobs by age, for reclaiming expired leases and the stuck sweep.
CREATE INDEX jobs_running_idx ON jobs (type, locked_at) WHERE status = 'running';
-- One open job per dedupe key and lane (finished jobs leave the index, so the key can
-- be reused), not across the whole table: one tenant's key can never collide with,
-- block or reveal another tenant's job.
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (lane, dedupe_key) WHERE status IN ('pending', 'running');
CREATE INDEX jobs_batch_idx ON jobs (batch_id) WHERE batch_id IS NOT NULL;
-- Pruning finished jobs oldest first, in bounded batches.
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE status IN ('done', 'failed');
-- GET /jobs: newest first over (created_at, id), the keyset the cursor carries. Neither
-- column ever changes, so status updates stay eligible for HOT as before.
CREATE INDEX jobs_listing_idx ON jobs (created_at, id);

-- Fairness counters, kept up to date by the triggers below so a claim never has to
-- count a day of history. One row per (job type, lane):
--   pending: jobs waiting in the lane (ready now or later);
--   served:  attempts started in the last 24 hours (deferrals give theirs back).
-- The lane's ranking, copied; and where its queue starts, so a claim can order lanes by
-- their oldest job and pass over lanes whose work is all deferred without probing jobs:
--   head_at:  created_at of the lane's oldest pending job;
--   ready_at: the lane has a job ready now exactly when ready_at <= now(). It is the run_after
--             of some pending job, no earlier than the earliest: that earliest one itself
--             whenever it lies in the future (the lane's wake-up time), otherwise any
--             pending job already due when the row was written (time only moves on, so
--             it stays due until it leaves, and then the row is written again).
--   Both NULL when nothing is pending.
-- Keyed by lane first, so a ranking change finds a lane's rows of every type. (The
-- counters are indexed, so their updates are not HOT: the price of reading lanes in
-- order. The table stays one small row per lane and type.)
CREATE TABLE job_lanes (
    type      text NOT NULL,
    lane      uuid NOT NULL,
    pending   integer NOT NULL DEFAULT 0,
    served    integer NOT NULL DEFAULT 0,
    priority  integer NOT NULL DEFAULT 0,
    paused    boolean NOT NULL DEFAULT false,
    head_at   timestamptz,
    ready_at  timestamptz,
    PRIMARY KEY (lane, type)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

-- The claim order: priority, least served, oldest job. ready_at is the last key only so
-- that `ready_at <= now()` is checked on the index entry itself: a lane whose work is
-- all deferred costs the walk one entry, no heap visit and no probe of jobs.
CREATE INDEX job_lanes_claim_idx ON job_lanes (type, priority DESC, served, head_at, ready_at)
    WHERE pending > 0 AND NOT paused;

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
CREATE FUNCTION jobs_lanes_after_insert() RETURNS trigger
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

CREATE FUNCTION jobs_lanes_after_update() RETURNS trigger
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

CREATE FUNCTION jobs_lanes_after_delete() RETURNS trigger
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

CREATE TRIGGER jobs_lanes_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_insert();
CREATE TRIGGER jobs_lanes_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_update();
CREATE TRIGGER jobs_lanes_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_lanes_after_delete();

-- A lane's ranking changed: copy it onto its job_lanes rows (locked in the jobs
-- triggers' order, so a claim running at the same time cannot deadlock with it).
-- SECURITY DEFINER: an operator's ranking (as skiplock_admin) reaches the counters.
CREATE FUNCTION lanes_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
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

-- A lane deleted takes its work with it: its jobs, its counters, and (foreign key) its
-- batches. A plug-in that owns lanes (the outreach example deletes a campaign's) or an
-- operator in psql deletes the lane row; this does the rest.
CREATE FUNCTION lanes_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM jobs WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lanes WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lane_hours WHERE lane IN (SELECT id FROM old_lanes);
    RETURN NULL;
END $$;
CREATE TRIGGER lanes_forget AFTER DELETE ON lanes
    REFERENCING OLD TABLE AS old_lanes FOR EACH STATEMENT EXECUTE FUNCTION lanes_after_delete();

-- One row per (recurring task, period): the insert that wins is the one that enqueues,
-- so any number of schedulers at once enqueue each period's task once.
CREATE TABLE recurring_ticks (
    task        text NOT NULL,
    period      timestamptz NOT NULL,
    job_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task, period)
);

-- Wake a waiting worker (python -m app worker) when jobs arrive: one notification
-- per statement, merged per transaction by PostgreSQL.
CREATE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('skiplock_jobs', '');
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_insert();

-- The HTTP API's own state: the stored answers of side-effecting requests sent with an
-- Idempotency-Key, and the index that serves newest-first keyset pages of jobs.

-- One row per key. The first request inserts it (ON CONFLICT DO NOTHING: the insert
-- that wins is the one that acts), then stores its answer here; later requests with
-- the same key and the same fingerprint get that answer back. status IS NULL means
-- the first request is still in progress.
CREATE TABLE idempotency_keys (
    key           text PRIMARY KEY,
    method        text NOT NULL,
    path          text NOT NULL,
    fingerprint   text NOT NULL,          -- sha256 of method, path, query and the canonical body
    claim         uuid NOT NULL,          -- the request that holds (or held) the key
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    status        integer,                -- the stored answer; NULL while in progress
    headers       jsonb,                  -- the few answer headers worth replaying
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz
);
-- Expiry (maintenance) deletes the oldest first, in bounded batches.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- Tenants: API keys, row-level security for the API's roles, and an audit log written
-- by triggers that the application cannot write, change or delete.
--
-- Who sees what:
--   * The API runs each request's transaction as the role skiplock_api (SET LOCAL ROLE),
--     with app.current_user_id / app.current_actor_kind / app.current_actor_id set
--     transaction-locally. skiplock_api does not own the tables and has no BYPASSRLS, so
--     the policies below filter every query it runs, whatever the application forgot.
--   * An admin request's transaction becomes skiplock_admin, and app_is_admin() asks
--     whether the current role is one: no setting can say so.
--   * The tenant is the owner of the live API key whose prefix and SHA-256 digest the
--     transaction presents (app.current_key_prefix, app.current_key_digest): settings
--     carry them, but app_user_id() checks them against api_keys, whose hashes the API
--     roles cannot read, so naming another tenant takes that tenant's key.
--   * The pipeline, the sweep and reconcile run as the connection's own role (the
--     tables' owner), which RLS does not filter: a separate role, not RLS turned off.

-- Roles are the cluster's: a role that only owns the database cannot make them, so a
-- superuser may make them first (docs/deploy.md#a-normal-database-role) and nothing made
-- or granted already is made or granted again (granting takes the right to grant).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_api') THEN
        CREATE ROLE skiplock_api NOLOGIN NOBYPASSRLS;
    END IF;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- another database of this cluster made it meanwhile
END $$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_admin') THEN
        CREATE ROLE skiplock_admin NOLOGIN NOBYPASSRLS;
    END IF;
EXCEPTION WHEN duplicate_object THEN
    NULL;
END $$;
-- An admin may do what the API may (and sees every tenant's rows: the policies below),
-- and the connecting role may switch to either (a superuser may anyway).
DO $$
BEGIN
    IF NOT pg_has_role('skiplock_admin', 'skiplock_api', 'MEMBER') THEN
        GRANT skiplock_api TO skiplock_admin;
    END IF;
    IF NOT pg_has_role(current_user, 'skiplock_api', 'MEMBER') THEN
        EXECUTE format('GRANT skiplock_api TO %I', current_user);
    END IF;
    IF NOT pg_has_role(current_user, 'skiplock_admin', 'MEMBER') THEN
        EXECUTE format('GRANT skiplock_admin TO %I', current_user);
    END IF;
END $$;

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    prefix       text NOT NULL UNIQUE,         -- shown and used to find the key: slk_xxxxxxxx
    hash         text NOT NULL,                -- sha256 of the whole key; the key itself is never stored
    admin        boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
CREATE INDEX api_keys_user_idx ON api_keys (user_id);

-- The live key a transaction presents: its owner and whether it is an admin key; no row
-- when none is presented, or the digest is not that key's, or it was revoked.
-- SECURITY DEFINER: it reads api_keys.hash, which the API roles cannot.
CREATE FUNCTION app_key_owner(OUT user_id uuid, OUT admin boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT k.user_id, k.admin
    FROM api_keys k
    WHERE k.prefix = nullif(current_setting('app.current_key_prefix', true), '')
      AND k.hash = current_setting('app.current_key_digest', true)
      AND k.revoked_at IS NULL
$$;

CREATE FUNCTION app_user_id() RETURNS uuid
LANGUAGE sql STABLE AS $$ SELECT user_id FROM app_key_owner() $$;

CREATE FUNCTION app_is_admin() RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT pg_has_role(current_user, 'skiplock_admin', 'MEMBER') $$;

-- Row-level security, each function in a scalar subquery: evaluated once per query (an
-- InitPlan), not once per row, since app_user_id() looks the key up. A tenant owns
-- lanes; jobs and batches are theirs through their lane. Work in a lane nobody owns
-- (the all-zero lane: maintenance, notifications) is the operator's: admins only.
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON users USING ((SELECT app_is_admin()) OR id = (SELECT app_user_id()));
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON api_keys USING ((SELECT app_is_admin()) OR user_id = (SELECT app_user_id()));
ALTER TABLE lanes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON lanes USING ((SELECT app_is_admin()) OR owner_id = (SELECT app_user_id()));
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON jobs USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
ALTER TABLE batches ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON batches USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));

-- Runs are the whole pipeline's, across tenants: the operator's view.
ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY operator ON runs USING (app_is_admin());

GRANT USAGE ON SCHEMA public TO skiplock_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON users, jobs, batches TO skiplock_api;
GRANT SELECT ON runs, lanes TO skiplock_api;
-- Key hashes are password equivalents: the API roles see every column but that one.
GRANT SELECT (id, user_id, prefix, admin, created_at, revoked_at) ON api_keys TO skiplock_api;
-- Operators rank lanes (PATCH /lanes/{id}); who owns a lane is not theirs to change.
GRANT UPDATE (priority, paused) ON lanes TO skiplock_admin;

-- The audit log. Written only by audit_row() below (SECURITY DEFINER: the API role has
-- no privilege on the table but SELECT, filtered to admins), never changed afterwards.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor_kind  text NOT NULL CHECK (actor_kind IN ('user', 'admin', 'system', 'pipeline')),
    actor_id    text,
    table_name  text NOT NULL,
    op          text NOT NULL CHECK (op IN ('INSERT', 'UPDATE', 'DELETE')),
    row_id      text,
    old_row     jsonb,
    new_row     jsonb
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY operator ON audit_log USING (app_is_admin());
GRANT SELECT ON audit_log TO skiplock_api;

-- TG_ARGV[0]: the row's key column. Secrets (api_keys.hash) never reach the log. A
-- request's actor is its verified key's owner (kind admin or user), whatever the
-- settings say; without a key, the settings name the actor (the pipeline,
-- the CLI, make run: the tables' owner, which needs no key).
CREATE FUNCTION audit_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    kind text := nullif(current_setting('app.current_actor_kind', true), '');
    actor text := nullif(current_setting('app.current_actor_id', true), '');
    key_owner record;
    old_json jsonb := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'hash' END;
    new_json jsonb := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'hash' END;
BEGIN
    IF coalesce(current_setting('app.current_key_prefix', true), '') <> '' THEN
        SELECT * INTO key_owner FROM app_key_owner();
        IF key_owner.user_id IS NOT NULL THEN
            kind := CASE WHEN key_owner.admin THEN 'admin' ELSE 'user' END;
            actor := key_owner.user_id::text;
        END IF;
    END IF;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'refusing to change % without an actor', TG_TABLE_NAME
            USING HINT = 'set app.current_actor_kind (user, admin, system, pipeline) and '
                         'app.current_actor_id in the transaction',
                  ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'UPDATE' AND old_json = new_json THEN
        RETURN NULL;  -- nothing changed
    END IF;
    INSERT INTO audit_log (actor_kind, actor_id, table_name, op, row_id, old_row, new_row)
    VALUES (kind, actor, TG_TABLE_NAME, TG_OP, coalesce(new_json, old_json) ->> TG_ARGV[0],
            old_json, new_json);
    RETURN NULL;
END $$;

-- The audit log is append-only, so whatever it copies stays for good: a job's payload
-- over 2 KiB (of its jsonb text) is kept as its SHA-256 and size instead,
--     {..., "payloadSha256": "<hex>", "payloadBytes": 61440}
-- in both row images. Done as the rows arrive (a BEFORE INSERT trigger on audit_log),
-- so it holds whichever function writes them, audit_row() or a later one.
CREATE FUNCTION audit_digest_payload(image jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN image ? 'payload' AND octet_length((image -> 'payload')::text) > 2048
        THEN (image - 'payload') || jsonb_build_object(
            'payloadSha256', encode(sha256(convert_to((image -> 'payload')::text, 'UTF8')), 'hex'),
            'payloadBytes', octet_length((image -> 'payload')::text))
        ELSE image
    END
$$;

CREATE FUNCTION audit_log_digest_payloads() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    NEW.old_row := audit_digest_payload(NEW.old_row);
    NEW.new_row := audit_digest_payload(NEW.new_row);
    RETURN NEW;
END $$;

CREATE TRIGGER digest_payloads BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_digest_payloads();

CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');
-- Jobs: audited when a person acts, or whenever a key is presented, so a request cannot
-- slip its writes past the log by calling itself the pipeline. The pipeline's own claims
-- and completions present no key and name no person: not audited, so the WHEN (evaluated
-- in C, no function call) keeps the hot path free of auditing.
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin')
                       OR current_setting('app.current_key_prefix', true) <> '')
    EXECUTE FUNCTION audit_row('id');

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: rows cannot be changed or deleted'
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();
