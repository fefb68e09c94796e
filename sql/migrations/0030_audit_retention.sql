-- Audit retention: maintenance deletes audit rows older than AUDIT_RETENTION_DAYS, a
-- bounded batch per call of audit_log_prune(), the only way a row leaves. The log stays
-- append-only for everyone else: the API roles have no DELETE privilege on it, this
-- function is not theirs to call, and the append_only trigger still refuses a plain
-- DELETE (or any UPDATE), the owner's included.
--
-- The function announces its cutoff transaction-locally, and the trigger lets a DELETE
-- through only for a row older than that cutoff; the announcement is withdrawn before the
-- function returns. Anyone may set that value by hand, but the DELETE that would use it
-- takes a role with DELETE on the log (the owner, who could drop the trigger anyway): the
-- cutoff marks intent, the privileges are the wall.
--
-- audit_log_at_idx (at DESC, id DESC) serves the oldest-first scan backwards, so no new
-- index: each call reads its batch from the old end of the index, not the whole table.

CREATE OR REPLACE FUNCTION audit_log_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    -- epoch seconds, so the round trip through text does not depend on DateStyle
    prune_before text := nullif(current_setting('skiplock.audit_prune_before', true), '');
BEGIN
    IF TG_OP = 'DELETE' AND prune_before IS NOT NULL
       AND extract(epoch FROM OLD.at) < prune_before::numeric THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only: rows cannot be changed or deleted'
        USING ERRCODE = 'insufficient_privilege';
END $$;

-- Delete at most max_rows audit rows older than older_than, oldest first; the count.
-- SECURITY INVOKER: the caller needs DELETE on audit_log (the owner, as maintenance runs).
CREATE FUNCTION audit_log_prune(older_than timestamptz, max_rows integer) RETURNS integer
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
    pruned integer;
BEGIN
    PERFORM set_config('skiplock.audit_prune_before', extract(epoch FROM older_than)::text, true);
    WITH doomed AS (
        SELECT id FROM audit_log
        WHERE at < older_than
        ORDER BY at, id
        LIMIT max_rows
        FOR UPDATE SKIP LOCKED  -- two overlapping maintenance runs split the work
    )
    DELETE FROM audit_log WHERE id = ANY (ARRAY(SELECT id FROM doomed));
    GET DIAGNOSTICS pruned = ROW_COUNT;
    PERFORM set_config('skiplock.audit_prune_before', '', true);
    RETURN pruned;
END $$;
REVOKE EXECUTE ON FUNCTION audit_log_prune(timestamptz, integer) FROM PUBLIC;
