INSERT INTO api_keys (user_id, prefix, hash, admin) VALUES ($1, $2, $3, $4)
RETURNING id, prefix, admin, created_at
