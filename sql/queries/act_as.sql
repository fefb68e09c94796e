-- Who this transaction acts for, read by the audit triggers: kind, actor id, tenant.
-- Transaction-local: gone at commit or rollback, so a pooled connection keeps nothing.
SELECT set_config('app.current_actor_kind', $1, true),
       set_config('app.current_actor_id', coalesce($2, ''), true),
       set_config('app.current_user_id', coalesce($3::uuid::text, ''), true)
