-- Enqueue one job. The partial unique index on taken dedupe keys (open jobs', and those of
-- jobs that ended less than their unique_for ago) turns a duplicate into a no-op: no row
-- comes back. :lane NULL: the default (all-zero) lane; :run_after NULL: now;
-- :unique_for NULL: the key is free again when the job ends, else that many seconds later.
-- :trace_context: the enqueuer's W3C traceparent, or NULL. :priority: higher is claimed first
-- within the lane (0 for most jobs).
INSERT INTO jobs (type, payload, dedupe_key, lane, run_after, batch_id, total, trace_context, unique_for, priority)
VALUES (:type, coalesce(:payload::jsonb, '{}'), :dedupe_key, coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'),
        coalesce(:run_after::timestamptz, now()), :batch_id, :total, :trace_context,
        make_interval(secs => :unique_for::float8), :priority::smallint)
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING id
