SELECT plan FROM subscriptions WHERE user_id = :owner_id
