INSERT INTO subscriptions (user_id, plan) VALUES (:user_id, :plan)
ON CONFLICT (user_id) DO UPDATE SET plan = excluded.plan, updated_at = now()
WHERE subscriptions.plan IS DISTINCT FROM excluded.plan
