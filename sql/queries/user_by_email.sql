SELECT u.id, u.email, s.plan FROM users u LEFT JOIN subscriptions s ON s.user_id = u.id WHERE u.email = $1
