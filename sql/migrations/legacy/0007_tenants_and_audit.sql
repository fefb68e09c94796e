-- Tenants: API keys, row-level security for the API's role, and an audit log written
-- by triggers that the application cannot write, change or delete.
--
-- Who sees what:
--   * The API runs each request's transaction as the role skiplock_api (SET LOCAL ROLE),
--     with app.current_user_id / app.current_actor_kind / app.current_actor_id set
--     transaction-locally. skiplock_api does not own the tables and has no BYPASSRLS, so
--     the policies below filter every query it runs, whatever the application forgot.
--   * The pipeline, the sweep and reconcile run as the connection's own role (the
--     tables' owner), which RLS does not filter: a separate role, not RLS turned off.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'skiplock_api') THEN
        CREATE ROLE skiplock_api NOLOGIN NOBYPASSRLS;
    END IF;
END $$;
-- The connecting role may switch to it (a superuser may anyway).
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('GRANT skiplock_api TO %I', current_user);
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

-- The tenant a transaction acts for, from transaction-local settings (empty: nobody).
CREATE FUNCTION app_user_id() RETURNS uuid
LANGUAGE sql STABLE AS $$ SELECT nullif(current_setting('app.current_user_id', true), '')::uuid $$;

CREATE FUNCTION app_is_admin() RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce(current_setting('app.current_actor_kind', true), '') = 'admin' $$;

-- Row-level security. Each tenant table is filtered by its owner, or through its campaign.
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON users USING (app_is_admin() OR id = app_user_id());

ALTER TABLE subscriptions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON subscriptions USING (app_is_admin() OR user_id = app_user_id());

ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON api_keys USING (app_is_admin() OR user_id = app_user_id());

ALTER TABLE campaigns ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON campaigns USING (app_is_admin() OR user_id = app_user_id());

-- Tables owned through a campaign. Ownerless jobs (maintenance, notifications) are
-- the operator's: admins only.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['jobs', 'batches', 'briefs', 'pages', 'contacts', 'drafts',
                             'campaign_usage', 'credit_ledger'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON %I USING (app_is_admin() OR campaign_id IN '
                       '(SELECT id FROM campaigns WHERE user_id = app_user_id()))', t);
    END LOOP;
END $$;

-- Runs are the whole pipeline's, across tenants: the operator's view.
ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY operator ON runs USING (app_is_admin());

GRANT USAGE ON SCHEMA public TO skiplock_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON users, subscriptions, campaigns, jobs, batches, briefs,
    pages, contacts, drafts, campaign_usage, credit_ledger TO skiplock_api;
GRANT SELECT ON runs, api_keys TO skiplock_api;

-- The fairness counters are kept by triggers on jobs; the API role may fire them but
-- not touch the counters itself: the trigger functions run as their owner.
ALTER FUNCTION jobs_lanes_after_insert() SECURITY DEFINER SET search_path = public, pg_temp;
ALTER FUNCTION jobs_lanes_after_update() SECURITY DEFINER SET search_path = public, pg_temp;
ALTER FUNCTION jobs_lanes_after_delete() SECURITY DEFINER SET search_path = public, pg_temp;

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

-- TG_ARGV[0]: the row's key column. Secrets (api_keys.hash) never reach the log.
CREATE FUNCTION audit_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    kind text := nullif(current_setting('app.current_actor_kind', true), '');
    old_json jsonb := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'hash' END;
    new_json jsonb := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'hash' END;
BEGIN
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
    VALUES (kind, nullif(current_setting('app.current_actor_id', true), ''), TG_TABLE_NAME, TG_OP,
            coalesce(new_json, old_json) ->> TG_ARGV[0], old_json, new_json);
    RETURN NULL;
END $$;

CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION audit_row('user_id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON campaigns
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION audit_row('id');
-- Jobs: only what people do through the API (enqueue, retry, cancel). The pipeline's
-- claims and completions never set a user or admin actor, so the WHEN (evaluated in C,
-- no function call) keeps the hot path free of auditing, and a plain INSERT from any
-- client still works.
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin'))
    EXECUTE FUNCTION audit_row('id');

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: rows cannot be changed or deleted'
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();

-- Dedupe keys are unique per lane (campaign, or ownerless work), not across the whole
-- table: one tenant's key can never collide with, block or reveal another tenant's job.
DROP INDEX jobs_open_dedupe_uq;
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (lane, dedupe_key) WHERE status IN ('pending', 'running');
