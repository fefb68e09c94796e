-- A live key by its prefix, with its owner (read as the connection's own role: this is
-- how a request finds out which tenant it is).
SELECT k.id, k.hash, k.admin, k.user_id, u.email
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.prefix = :prefix AND k.revoked_at IS NULL
