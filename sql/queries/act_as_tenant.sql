-- An API request's transaction: drop to the RLS-bound role skiplock_api and name the
-- tenant and actor, all transaction-local (SET LOCAL), in one round trip.
SELECT set_config('role', 'skiplock_api', true),
       set_config('app.current_actor_kind', $1, true),
       set_config('app.current_actor_id', coalesce($2, ''), true),
       set_config('app.current_user_id', coalesce($3::uuid::text, ''), true)
