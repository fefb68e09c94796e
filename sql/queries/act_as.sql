-- Who this transaction acts for, read by the audit triggers: kind and actor id.
-- Transaction-local: gone at commit or rollback, so a pooled connection keeps nothing.
-- (The connection's own role is not filtered by tenant: no tenant is named here.)
SELECT set_config('app.current_actor_kind', :actor_kind, true),
       set_config('app.current_actor_id', coalesce(:actor_id, ''), true)
