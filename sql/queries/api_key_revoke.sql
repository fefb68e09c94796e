UPDATE api_keys SET revoked_at = now() WHERE prefix = :prefix AND revoked_at IS NULL RETURNING id
