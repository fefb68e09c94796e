-- User $1's plan: the subscription they have, or a new one on plan $2 when they have none.
WITH new AS (
    INSERT INTO subscriptions (user_id, plan) VALUES ($1, $2)
    ON CONFLICT (user_id) DO NOTHING
    RETURNING plan
)
SELECT plan, true AS created FROM new
UNION ALL
SELECT plan, false FROM subscriptions WHERE user_id = $1
