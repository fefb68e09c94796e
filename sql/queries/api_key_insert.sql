INSERT INTO api_keys (user_id, prefix, hash, admin) VALUES (:user_id, :prefix, :digest, :admin)
RETURNING id, prefix, admin, created_at
