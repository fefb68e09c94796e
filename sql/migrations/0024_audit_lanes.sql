-- Lanes: an operator's PATCH /lanes (a priority, a pause) goes into the audit log like
-- every other change a person or the CLI makes. The rows the queue makes by itself (a lane
-- that first gets work, from the jobs triggers) and the pipeline's writes name no actor:
-- not audited, and the WHEN (evaluated in C) costs them nothing.
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON lanes
    FOR EACH ROW WHEN (current_setting('app.current_actor_kind', true) IN ('user', 'admin', 'system')
                       OR current_setting('app.current_key_prefix', true) <> '')
    EXECUTE FUNCTION audit_row('id');
