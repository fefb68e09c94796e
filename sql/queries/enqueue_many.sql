-- Enqueue many jobs in one statement, from parallel arrays. Duplicates of an open
-- job (or of an earlier row in the same call) are skipped; the new ids come back.
INSERT INTO jobs (type, payload, dedupe_key, campaign_id, run_after)
SELECT u.type, coalesce(u.payload, '{}'), u.dedupe_key, u.campaign_id, coalesce(u.run_after, now())
FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::uuid[], $5::timestamptz[])
     AS u(type, payload, dedupe_key, campaign_id, run_after)
ON CONFLICT (dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
