-- Name an actor only if the transaction has none yet (a person's actor set by the API wins).
SELECT set_config('app.current_actor_kind',
                  coalesce(nullif(current_setting('app.current_actor_kind', true), ''), :actor_kind), true),
       set_config('app.current_actor_id',
                  coalesce(nullif(current_setting('app.current_actor_id', true), ''), :actor_id), true)
