-- Claim Idempotency-Key :key for this request (claim token :token). The insert that wins is the
-- request that acts; every other one finds the row and waits for, or replays, its answer.
INSERT INTO idempotency_keys (key, method, path, fingerprint, claim)
VALUES (:key, :method, :path, :fingerprint, :token)
ON CONFLICT (key) DO NOTHING
RETURNING claim
