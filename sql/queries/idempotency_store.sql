-- Store the answer of the request holding key $1 (claim $2): it is replayed from now on.
UPDATE idempotency_keys
SET status = $3, headers = $4, body = $5, completed_at = now()
WHERE key = $1 AND claim = $2 AND status IS NULL
