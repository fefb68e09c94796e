-- Give key :key back (claim :token) when the request produced no answer worth keeping (a 5xx,
-- a refused credential): the client may send it again and it will act then.
DELETE FROM idempotency_keys
WHERE key = :key AND claim = :token AND status IS NULL
