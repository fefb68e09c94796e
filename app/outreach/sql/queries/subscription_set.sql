INSERT INTO subscriptions (user_id, plan) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET plan = excluded.plan, updated_at = now()
WHERE subscriptions.plan IS DISTINCT FROM excluded.plan
