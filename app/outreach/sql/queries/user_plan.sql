SELECT plan FROM subscriptions WHERE user_id = $1
