-- Take over key $1 for claim $2 when its holder has been in progress longer than $4
-- seconds (it died: no request lives that long) and the request is the same ($3).
UPDATE idempotency_keys
SET claim = $2, claimed_at = now()
WHERE key = $1 AND status IS NULL AND fingerprint = $3
  AND claimed_at < now() - make_interval(secs => $4)
RETURNING claim
