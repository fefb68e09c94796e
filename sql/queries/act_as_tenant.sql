-- An API request's transaction, in one round trip and all transaction-local (SET LOCAL):
-- drop to the role the key allows (skiplock_admin for an admin key, else skiplock_api),
-- name the actor, and present the key: its prefix :key_prefix and SHA-256 digest :key_digest. Row-level
-- security finds the tenant from the key itself (app_user_id()), so no setting the role
-- can change names another tenant; admin is the role, not a setting. :statement_timeout_ms, when given, is
-- the transaction's statement_timeout (ms); NULL keeps the one in force (the role's or
-- the database's), so it is never loosened here. Local, so behind a transaction pooler
-- the next client's transaction on this server session does not inherit it.
SELECT set_config('role', CASE WHEN :actor_kind = 'admin' THEN 'skiplock_admin' ELSE 'skiplock_api' END, true),
       set_config('app.current_actor_kind', :actor_kind, true),
       set_config('app.current_actor_id', coalesce(:actor_id, ''), true),
       set_config('app.current_key_prefix', :key_prefix, true),
       set_config('app.current_key_digest', :key_digest, true),
       set_config('statement_timeout', coalesce(:statement_timeout_ms::text, current_setting('statement_timeout')), true)
