-- Store the answer of the request holding key :key (claim :token): it is replayed from now on.
UPDATE idempotency_keys
SET status = :status, headers = :headers, body = :body, completed_at = now()
WHERE key = :key AND claim = :token AND status IS NULL
