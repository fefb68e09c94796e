-- The row for Idempotency-Key :key: who asked first, and the answer once there is one.
SELECT key, method, path, fingerprint, claim, claimed_at, status, headers, body,
       extract(epoch FROM now() - claimed_at)::float8 AS held_seconds
FROM idempotency_keys
WHERE key = :key
