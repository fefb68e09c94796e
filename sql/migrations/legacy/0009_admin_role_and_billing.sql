-- Admin is a database role, the tenant comes from a verified API key, and billing is not
-- the API's to write.
--
-- Before: app_is_admin() and app_user_id() read settings that any role may set, so SQL
-- running as skiplock_api could call itself an admin, or another tenant, with
-- set_config(). Now:
--   * An admin request's transaction becomes skiplock_admin (SET LOCAL ROLE), and
--     app_is_admin() asks whether the current role is one: no setting can say so.
--   * The tenant is the owner of the live API key whose prefix and SHA-256 digest the
--     transaction presents (app.current_key_prefix, app.current_key_digest). Settings
--     still carry them, but app_user_id() checks them against api_keys, whose hashes the
--     API roles cannot read: naming another tenant takes that tenant's key.
--   * The audit log takes a request's actor from that same key, not from settings.
--   * skiplock_api (and skiplock_admin) may read subscriptions, usage and credits but not
--     write them; the two writes a request needs go through SECURITY DEFINER functions
--     that do exactly that one thing.

DO $$
BEGIN
    CREATE ROLE skiplock_admin NOLOGIN NOBYPASSRLS;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- roles are cluster-wide: another database of this cluster made it
END $$;
-- An admin may do what the API may (and sees every tenant's rows: the policies below).
GRANT skiplock_api TO skiplock_admin;
-- The connecting role may switch to it (a superuser may anyway).
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('GRANT skiplock_admin TO %I', current_user);
    END IF;
END $$;

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

CREATE OR REPLACE FUNCTION app_user_id() RETURNS uuid
LANGUAGE sql STABLE AS $$ SELECT user_id FROM app_key_owner() $$;

CREATE OR REPLACE FUNCTION app_is_admin() RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT pg_has_role(current_user, 'skiplock_admin', 'MEMBER') $$;

-- The policies again, with each function in a scalar subquery: evaluated once per query
-- (an InitPlan), not once per row, now that app_user_id() looks the key up.
DROP POLICY tenant ON users;
CREATE POLICY tenant ON users USING ((SELECT app_is_admin()) OR id = (SELECT app_user_id()));
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['subscriptions', 'api_keys', 'campaigns'] LOOP
        EXECUTE format('DROP POLICY tenant ON %I', t);
        EXECUTE format('CREATE POLICY tenant ON %I USING ((SELECT app_is_admin()) OR '
                       'user_id = (SELECT app_user_id()))', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['jobs', 'batches', 'briefs', 'pages', 'contacts', 'drafts',
                             'campaign_usage', 'credit_ledger'] LOOP
        EXECUTE format('DROP POLICY tenant ON %I', t);
        EXECUTE format('CREATE POLICY tenant ON %I USING ((SELECT app_is_admin()) OR campaign_id IN '
                       '(SELECT id FROM campaigns WHERE user_id = (SELECT app_user_id())))', t);
    END LOOP;
END $$;

-- Key hashes are password equivalents: the API roles see every column but that one.
REVOKE SELECT ON api_keys FROM skiplock_api;
GRANT SELECT (id, user_id, prefix, admin, created_at, revoked_at) ON api_keys TO skiplock_api;

-- Billing: read-only for the API roles.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON subscriptions, campaign_usage, credit_ledger
    FROM skiplock_api;
REVOKE ALL ON quota_ledger FROM skiplock_api;

-- Each owner's share of the shared quota, per UTC day (the share is their plan's, see
-- app/outreach/plans.py): `spent` only grows, by one guarded statement, so one tenant
-- cannot spend the whole day's units however many of their jobs run at once.
CREATE TABLE quota_user_ledger (
    user_id  uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day      date NOT NULL,
    spent    integer NOT NULL DEFAULT 0 CHECK (spent >= 0),
    PRIMARY KEY (user_id, day)
);
ALTER TABLE quota_user_ledger ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON quota_user_ledger USING ((SELECT app_is_admin()) OR user_id = (SELECT app_user_id()));
GRANT SELECT ON quota_user_ledger TO skiplock_api;

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

-- The audit log: a request's actor is its verified key's owner (kind admin or user),
-- whatever the settings say; without a key, the settings name the actor (the pipeline,
-- the CLI, make run: the tables' owner, which needs no key).
CREATE OR REPLACE FUNCTION audit_row() RETURNS trigger
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

-- Jobs: audited when a person acts, now also whenever a key is presented, so a request
-- cannot slip its writes past the log by calling itself the pipeline. The pipeline's own
-- claims and completions present no key and name no person: still not audited.
DROP TRIGGER audit ON jobs;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin')
                       OR current_setting('app.current_key_prefix', true) <> '')
    EXECUTE FUNCTION audit_row('id');
