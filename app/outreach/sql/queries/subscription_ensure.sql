-- User $1's plan: the subscription they have, or a new one on plan $2 when they have none
-- (`created` says which). Through a SECURITY DEFINER function: the API roles do not write
-- subscriptions, and only an admin's may call it.
SELECT plan, created FROM billing_subscription_ensure($1, $2)
