-- The outreach example's schema, squashed: everything of the example that the legacy
-- chain (sql/migrations/legacy/0001..0012) made, on top of the queue's chain. A database
-- made before the split already has it (sql/migrations/legacy/bridge.sql).
--
-- A campaign's id is its lane's id: the example makes and ranks the lane of each
-- campaign (triggers below), and deleting a campaign deletes its lane, which takes the
-- lane's jobs and batches with it (the queue's lanes_forget trigger).

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

-- The example pipeline (app/outreach/): site -> brief -> crawl -> contacts -> drafts,
-- with the shared quota ledger, per-campaign daily allowances and the credits ledger.

-- What the brief stage learned from a campaign's home page. One per campaign.
CREATE TABLE briefs (
    campaign_id  uuid PRIMARY KEY REFERENCES campaigns (id) ON DELETE CASCADE,
    url          text NOT NULL,          -- the URL asked for
    final_url    text,                   -- where redirects ended
    status_code  integer,                -- NULL when nothing was fetched (robots.txt)
    title        text NOT NULL DEFAULT '',
    description  text NOT NULL DEFAULT '',
    keywords     text[] NOT NULL DEFAULT '{}',
    language     text,
    note         text,                   -- why there is no crawl, when there is none
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Every page of a campaign's site the crawl has discovered, one row per normalised URL.
-- The row is inserted when the page is discovered (INSERT ... ON CONFLICT DO NOTHING),
-- and only a new row gets a crawl job: a page is fetched at most once per campaign,
-- however many pages link to it.
--   queued      discovered, a crawl job is on its way
--   fetched     a response was recorded (status_code says which; 4xx included)
--   blocked     robots.txt disallows it
--   redirected  the server sent it elsewhere (final_url); the content lives on that page's row
--   skipped     not worth keeping: off-site redirect, not text, too large (note says which)
--   failed      the crawl gave up (server errors, timeouts); error text in note
CREATE TABLE pages (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id   uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    url           text NOT NULL,
    depth         integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    state         text NOT NULL DEFAULT 'queued'
                      CHECK (state IN ('queued', 'fetched', 'blocked', 'redirected', 'skipped', 'failed')),
    status_code   integer,
    final_url     text,
    content_type  text,
    title         text,
    body          text,
    note          text,
    discovered_at timestamptz NOT NULL DEFAULT now(),
    fetched_at    timestamptz,
    UNIQUE (campaign_id, url)
);

-- People to contact, unique per campaign and value, with the page they were found on.
CREATE TABLE contacts (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    kind         text NOT NULL,          -- email, youtube, instagram, tiktok, x, twitch, ...
    value        text NOT NULL,          -- the normalised address or profile URL
    handle       text NOT NULL DEFAULT '',
    page_id      uuid REFERENCES pages (id) ON DELETE SET NULL,
    page_url     text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (campaign_id, value)
);

-- One drafted first message per contact.
CREATE TABLE drafts (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id        uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    contact_id         uuid NOT NULL UNIQUE REFERENCES contacts (id) ON DELETE CASCADE,
    job_id             uuid,             -- the draft job that wrote it (no FK: jobs are pruned)
    body               text NOT NULL,
    model              text NOT NULL,    -- 'template', or the LLM model name
    prompt_tokens      integer NOT NULL DEFAULT 0,
    completion_tokens  integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- The shared third-party quota, one row per UTC day. `units` and `reserve` are the
-- limits in force (refreshed from the settings by every spend); `spent` only grows, by
-- one guarded UPDATE, so it can never pass `units`. The reserve is for runs a person
-- started: scheduled runs stop when only the reserve is left.
CREATE TABLE quota_ledger (
    day        date PRIMARY KEY,
    units      integer NOT NULL CHECK (units >= 0),
    reserve    integer NOT NULL CHECK (reserve >= 0),
    spent      integer NOT NULL DEFAULT 0 CHECK (spent >= 0 AND spent <= units),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- What each campaign used of its plan's daily allowances, per UTC day.
CREATE TABLE campaign_usage (
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    day          date NOT NULL,
    pages        integer NOT NULL DEFAULT 0 CHECK (pages >= 0),
    credits      integer NOT NULL DEFAULT 0 CHECK (credits >= 0),
    PRIMARY KEY (campaign_id, day)
);

-- Plan credits, one line per charge and per refund. A job is charged at most once
-- (its retries reuse the charge) and refunded at most once: the unique (job_id, kind)
-- Plan credits, one line per charge and per refund. A job is charged at most once per
-- generation (its retries reuse the charge) and refunded at most once per generation:
-- the unique (job_id, kind, seq) makes a second charge or refund a no-op, whoever
-- attempts it. Generations (seq = refunds so far): a retried job pays again once its
-- earlier charge was refunded, so a job refunded on giving up and then retried by a
-- person does not draft for free.
CREATE TABLE credit_ledger (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    job_id       uuid NOT NULL,
    day          date NOT NULL,          -- the allowance day the credit came from
    kind         text NOT NULL CHECK (kind IN ('charge', 'refund')),
    credits      integer NOT NULL CHECK (credits > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    seq          integer NOT NULL DEFAULT 0 CHECK (seq >= 0),
    CONSTRAINT credit_ledger_once_per_generation UNIQUE (job_id, kind, seq)
);
CREATE INDEX credit_ledger_campaign_idx ON credit_ledger (campaign_id, created_at);

-- Each owner's share of the shared quota, per UTC day (the share is their plan's, see
-- app/outreach/plans.py): `spent` only grows, by one guarded statement, so one tenant
-- cannot spend the whole day's units however many of their jobs run at once.
CREATE TABLE quota_user_ledger (
    user_id  uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day      date NOT NULL,
    spent    integer NOT NULL DEFAULT 0 CHECK (spent >= 0),
    PRIMARY KEY (user_id, day)
);

-- The due-time example (app/outreach/deadlines.py): an SLA-style deadline whose breach is
-- latched exactly once, by a job that becomes due at the deadline.
CREATE TABLE deadlines (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subject      text NOT NULL,           -- what the promise is about, e.g. "ticket:123"
    due_at       timestamptz NOT NULL,
    resolved_at  timestamptz,             -- kept in time: the breach never fires
    breached_at  timestamptz,             -- set once, by whichever run gets there first
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Row-level security (see the queue's chain for the roles): a tenant sees their own
-- subscription and campaigns, and what belongs to those campaigns.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['subscriptions', 'campaigns', 'quota_user_ledger'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON %I USING ((SELECT app_is_admin()) OR '
                       'user_id = (SELECT app_user_id()))', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['briefs', 'pages', 'contacts', 'drafts', 'campaign_usage',
                             'credit_ledger'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON %I USING ((SELECT app_is_admin()) OR campaign_id IN '
                       '(SELECT id FROM campaigns WHERE user_id = (SELECT app_user_id())))', t);
    END LOOP;
END $$;

GRANT SELECT, INSERT, UPDATE, DELETE ON campaigns, briefs, pages, contacts, drafts TO skiplock_api;
-- Billing: read-only for the API roles; the two writes a request needs go through the
-- SECURITY DEFINER functions below, which do exactly that one thing. The shared quota
-- is not theirs to see.
GRANT SELECT ON subscriptions, campaign_usage, credit_ledger, quota_user_ledger TO skiplock_api;

CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION audit_row('user_id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON campaigns
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');

-- POST /campaigns with an admin key may create an owner, on a plan: their subscription
-- row, made only when they have none. Returns the plan they are on, and whether it was
-- made now. Admins only (the owner's own role may call it anyway).
CREATE FUNCTION billing_subscription_ensure(p_user uuid, p_plan text)
RETURNS TABLE (plan text, created boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH new AS (
        INSERT INTO subscriptions (user_id, plan) VALUES (p_user, p_plan)
        ON CONFLICT (user_id) DO NOTHING
        RETURNING subscriptions.plan
    )
    SELECT new.plan, true FROM new
    UNION ALL
    SELECT s.plan, false FROM subscriptions s WHERE s.user_id = p_user
$$;
REVOKE EXECUTE ON FUNCTION billing_subscription_ensure(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION billing_subscription_ensure(uuid, text) TO skiplock_admin;

-- Give back job p_job's standing charge (its latest generation), exactly once, when it
-- is owed: the job is pending (its next attempt pays again) or failed (gave up, or
-- cancelled), and delivered no draft. Never while it runs (the attempt is using the
-- credit) nor once it is done. So whoever calls it, for whichever job, it can only make
-- a refund the job's own ending makes anyway; the cancel of a job through the API runs
-- it from the request's transaction. The credit goes back to the day it was taken from.
-- Returns the credits refunded.
CREATE FUNCTION billing_refund_job(p_job uuid) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH owed AS (
        SELECT j.id FROM jobs j
        WHERE j.id = p_job AND j.status IN ('pending', 'failed')
          AND NOT EXISTS (SELECT 1 FROM drafts d WHERE d.job_id = j.id)
    ), charge AS (
        SELECT l.campaign_id, l.day, l.credits, l.seq FROM credit_ledger l
        WHERE l.job_id = (SELECT id FROM owed) AND l.kind = 'charge'
        ORDER BY l.seq DESC
        LIMIT 1
    ), refund AS (
        INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits, seq)
        SELECT campaign_id, p_job, day, 'refund', credits, seq FROM charge
        ON CONFLICT (job_id, kind, seq) DO NOTHING
        RETURNING campaign_id, day, credits
    ), usage AS (
        UPDATE campaign_usage u
        SET credits = greatest(u.credits - r.credits, 0)
        FROM refund r
        WHERE u.campaign_id = r.campaign_id AND u.day = r.day
    )
    SELECT coalesce(sum(credits), 0)::int FROM refund
$$;
REVOKE EXECUTE ON FUNCTION billing_refund_job(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION billing_refund_job(uuid) TO skiplock_api;

-- The outreach example ranks the queue's lanes. A campaign's lane (lanes.id = the
-- campaign's id) runs at its owner's plan priority (subscriptions.plan; an owner without
-- a subscription is on DEFAULT_PLAN 'free') and is paused while the campaign is; work
-- with no owner (the all-zero lane, a campaign without owner) runs as OWNERLESS_PLAN
-- 'standard' (app/outreach/plans.py). Triggers on campaigns, subscriptions and lanes
-- keep it so whoever makes the change (the API, the CLI, psql); the queue's own
-- triggers copy it on to the claim's index.

-- PLANS' priorities, for SQL. A view of constants rather than a table: nothing can
-- empty or edit it short of a migration, which is also what changing PLANS takes (with a
-- re-rank: outreach_rank_lanes over every lane). A test fails if it drifts from PLANS.
CREATE VIEW plan_priorities (plan, priority) AS
VALUES ('free', 1), ('standard', 2), ('pro', 3);

-- The ranking each of these lanes should have now.
CREATE FUNCTION outreach_lane_ranks(ids uuid[])
RETURNS TABLE (id uuid, owner_id uuid, priority integer, paused boolean)
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT x.id, c.user_id,
           CASE WHEN c.user_id IS NULL  -- not a campaign, or nobody's: OWNERLESS_PLAN
                THEN (SELECT p.priority FROM plan_priorities p WHERE p.plan = 'standard')
                ELSE coalesce((SELECT p.priority FROM plan_priorities p WHERE p.plan = s.plan),
                              -- no subscription (or a plan no longer sold): DEFAULT_PLAN
                              (SELECT p.priority FROM plan_priorities p WHERE p.plan = 'free'))
           END,
           coalesce(c.status = 'paused', false)
    FROM unnest(ids) AS x(id)
    LEFT JOIN campaigns c ON c.id = x.id
    LEFT JOIN subscriptions s ON s.user_id = c.user_id
$$;

-- Set these lanes' ranking from the campaigns and plans, all of it or only the part
-- that depends on what changed: a status change and a plan change committing at the
-- same time each write their own column, so neither undoes the other.
CREATE FUNCTION outreach_rank_lanes(ids uuid[], rank_owner boolean, rank_paused boolean)
RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM lanes l WHERE l.id = ANY (ids) ORDER BY l.id FOR NO KEY UPDATE;
    UPDATE lanes l
    SET owner_id = CASE WHEN rank_owner THEN r.owner_id ELSE l.owner_id END,
        priority = CASE WHEN rank_owner THEN r.priority ELSE l.priority END,
        paused = CASE WHEN rank_paused THEN r.paused ELSE l.paused END
    FROM outreach_lane_ranks(ids) r
    WHERE l.id = r.id
      AND ((rank_owner AND (l.owner_id, l.priority) IS DISTINCT FROM (r.owner_id, r.priority))
           OR (rank_paused AND l.paused IS DISTINCT FROM r.paused));
END $$;
REVOKE EXECUTE ON FUNCTION outreach_rank_lanes(uuid[], boolean, boolean) FROM PUBLIC;

-- Every lane ranked now: the campaigns' (made when missing) and the others (ownerless),
-- for a queue that had lanes before the plug-in came.
INSERT INTO lanes AS l (id, owner_id, priority, paused)
SELECT r.id, r.owner_id, r.priority, r.paused
FROM outreach_lane_ranks(ARRAY(SELECT id FROM campaigns UNION SELECT id FROM lanes)) r
ORDER BY r.id
ON CONFLICT (id) DO UPDATE
    SET owner_id = excluded.owner_id, priority = excluded.priority, paused = excluded.paused
    WHERE (l.owner_id, l.priority, l.paused)
          IS DISTINCT FROM (excluded.owner_id, excluded.priority, excluded.paused);

-- The triggers run as their owner: the API's role changes campaigns but may not write
-- lanes.

-- A lane the queue made on its own (its first job came before any ranking, e.g. the
-- ownerless lane) is ranked as soon as it exists. (A campaign's lane comes ranked.)
CREATE FUNCTION outreach_lanes_made() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT r.id FROM outreach_lane_ranks(ARRAY(SELECT id FROM new_lanes)) r
        JOIN new_lanes n ON n.id = r.id
        WHERE (n.owner_id, n.priority, n.paused) IS DISTINCT FROM (r.owner_id, r.priority, r.paused)),
        true, true);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_rank AFTER INSERT ON lanes
    REFERENCING NEW TABLE AS new_lanes FOR EACH STATEMENT EXECUTE FUNCTION outreach_lanes_made();

-- A new campaign gets its lane. Its owner's plan is read after the foreign key check
-- has share-locked the owner's users row, so a plan change in flight (which locks that
-- row, below) is waited for and seen.
CREATE FUNCTION outreach_campaigns_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO lanes AS l (id, owner_id, priority, paused)
    SELECT r.id, r.owner_id, r.priority, r.paused
    FROM outreach_lane_ranks(ARRAY(SELECT id FROM new_campaigns)) r
    ORDER BY r.id
    ON CONFLICT (id) DO UPDATE
        SET owner_id = excluded.owner_id, priority = excluded.priority, paused = excluded.paused;
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_insert AFTER INSERT ON campaigns
    REFERENCING NEW TABLE AS new_campaigns FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_inserted();

-- Paused or resumed: the lane's paused flag. A new owner: its priority.
CREATE FUNCTION outreach_campaigns_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT n.id FROM new_campaigns n JOIN old_campaigns o ON o.id = n.id
        WHERE n.status IS DISTINCT FROM o.status), false, true);
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT n.id FROM new_campaigns n JOIN old_campaigns o ON o.id = n.id
        WHERE n.user_id IS DISTINCT FROM o.user_id), true, false);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_update AFTER UPDATE ON campaigns
    REFERENCING OLD TABLE AS old_campaigns NEW TABLE AS new_campaigns
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_updated();

-- A deleted campaign's lane goes with it, and with the lane its jobs and batches (the
-- queue's lanes_forget trigger).
CREATE FUNCTION outreach_campaigns_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM lanes WHERE id IN (SELECT id FROM old_campaigns);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_delete AFTER DELETE ON campaigns
    REFERENCING OLD TABLE AS old_campaigns FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_deleted();

-- A plan changed (subscribed, changed, cancelled): re-rank the owners' campaigns. The
-- owners' users rows are locked first: a campaign being created for one of them right
-- now (its insert holds a key-share lock on that row until it commits) is waited for,
-- then seen; one created later waits for this change and reads the new plan.
CREATE FUNCTION outreach_rank_owners(user_ids uuid[]) RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM users u WHERE u.id = ANY (user_ids) ORDER BY u.id FOR UPDATE;
    PERFORM outreach_rank_lanes(ARRAY(SELECT c.id FROM campaigns c WHERE c.user_id = ANY (user_ids)),
                                true, false);
END $$;
REVOKE EXECUTE ON FUNCTION outreach_rank_owners(uuid[]) FROM PUBLIC;

CREATE FUNCTION outreach_subscriptions_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(SELECT user_id FROM new_subscriptions));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_insert AFTER INSERT ON subscriptions
    REFERENCING NEW TABLE AS new_subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_inserted();

CREATE FUNCTION outreach_subscriptions_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(
        SELECT n.user_id FROM new_subscriptions n
        LEFT JOIN old_subscriptions o ON o.user_id = n.user_id
        WHERE n.plan IS DISTINCT FROM o.plan
        UNION
        SELECT o.user_id FROM old_subscriptions o
        WHERE NOT EXISTS (SELECT 1 FROM new_subscriptions n WHERE n.user_id = o.user_id)));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_update AFTER UPDATE ON subscriptions
    REFERENCING OLD TABLE AS old_subscriptions NEW TABLE AS new_subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_updated();

CREATE FUNCTION outreach_subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(SELECT user_id FROM old_subscriptions));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_delete AFTER DELETE ON subscriptions
    REFERENCING OLD TABLE AS old_subscriptions FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_deleted();
