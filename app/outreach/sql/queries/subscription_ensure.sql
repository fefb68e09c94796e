-- User :user_id's plan: the subscription they have, or a new one on plan :plan when they have none
-- (`created` says which). Through a SECURITY DEFINER function: the API roles do not write
-- subscriptions, and only an admin's may call it.
SELECT plan, created FROM billing_subscription_ensure(:user_id, :plan)
