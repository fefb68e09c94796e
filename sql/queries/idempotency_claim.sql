-- Claim Idempotency-Key $1 for this request (claim token $5). The insert that wins is the
-- request that acts; every other one finds the row and waits for, or replays, its answer.
INSERT INTO idempotency_keys (key, method, path, fingerprint, claim)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key) DO NOTHING
RETURNING claim
