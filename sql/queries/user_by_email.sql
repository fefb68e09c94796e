SELECT u.id, u.email FROM users u WHERE u.email = :email
