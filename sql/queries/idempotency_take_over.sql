-- Take over key :key for claim :token when its holder has been in progress longer than :older_than_seconds
-- seconds (it died: no request lives that long) and the request is the same (:fingerprint).
UPDATE idempotency_keys
SET claim = :token, claimed_at = now()
WHERE key = :key AND status IS NULL AND fingerprint = :fingerprint
  AND claimed_at < now() - make_interval(secs => :older_than_seconds)
RETURNING claim
