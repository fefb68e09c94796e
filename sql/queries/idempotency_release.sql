-- Give key $1 back (claim $2) when the request produced no answer worth keeping (a 5xx,
-- a refused credential): the client may send it again and it will act then.
DELETE FROM idempotency_keys
WHERE key = $1 AND claim = $2 AND status IS NULL
