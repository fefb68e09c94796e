-- Jobs: audited whenever the transaction names an actor (a person over the API, the
-- `skiplock` CLI as system/cli, `make run`, a plug-in acting as the system) or presents
-- a key. Only the pipeline's claims and completions name nobody: those stay unaudited,
-- and the WHEN (evaluated in C, no function call) still keeps their hot path free of it.
DROP TRIGGER audit ON jobs;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin', 'system')
                       OR current_setting('app.current_key_prefix', true) <> '')
    EXECUTE FUNCTION audit_row('id');
