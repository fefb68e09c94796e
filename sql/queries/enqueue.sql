-- Enqueue one job. The partial unique index on open dedupe keys turns a duplicate
-- into a no-op: no row comes back. $4 NULL: the default (all-zero) lane; $5 NULL: now.
INSERT INTO jobs (type, payload, dedupe_key, lane, run_after, batch_id, total)
VALUES ($1, coalesce($2::jsonb, '{}'), $3, coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'),
        coalesce($5::timestamptz, now()), $6, $7)
ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
