-- An operator pauses a whole stage, for every lane (PATCH /stages/{type}, `skiplock stages
-- pause`): the claim takes nothing of a type listed here, stale leases included; running
-- jobs finish. A row per paused type, so the claim's look is one probe of a table that
-- changes only when a person acts.
CREATE TABLE paused_stages (
    type       text PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now()
);

-- Audited as lanes are (0024): every pause and resume names its actor.
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON paused_stages
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin', 'system')
                       OR current_setting('app.current_key_prefix', true) <> '')
    EXECUTE FUNCTION audit_row('type');

-- A resumed stage wakes a waiting worker as new work does.
CREATE TRIGGER paused_stages_notify_resumed AFTER DELETE ON paused_stages
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_insert();

GRANT SELECT ON paused_stages TO skiplock_api;
GRANT INSERT, DELETE ON paused_stages TO skiplock_admin;
