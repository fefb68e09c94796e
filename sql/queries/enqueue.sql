-- Enqueue one job. The partial unique index on open dedupe keys turns a duplicate
-- into a no-op: no row comes back. :lane NULL: the default (all-zero) lane; :run_after NULL: now.
-- :trace_context: the enqueuer's W3C traceparent, or NULL.
INSERT INTO jobs (type, payload, dedupe_key, lane, run_after, batch_id, total, trace_context)
VALUES (:type, coalesce(:payload::jsonb, '{}'), :dedupe_key, coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'),
        coalesce(:run_after::timestamptz, now()), :batch_id, :total, :trace_context)
ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
