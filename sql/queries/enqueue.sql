-- Enqueue one job. The partial unique index on open dedupe keys turns a duplicate
-- into a no-op: no row comes back. $5 NULL means now.
INSERT INTO jobs (type, payload, dedupe_key, campaign_id, run_after, batch_id, total)
VALUES ($1, coalesce($2::jsonb, '{}'), $3, $4, coalesce($5::timestamptz, now()), $6, $7)
ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
