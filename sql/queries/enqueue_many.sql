-- Enqueue many jobs in one statement, from parallel arrays. Duplicates of an open
-- job, of one that ended within its unique_for (seconds), or of an earlier row in the same
-- call are skipped; the new rows come back.
-- A NULL lane is the default (all-zero) lane; :priorities order each job within its lane.
INSERT INTO jobs (type, payload, dedupe_key, lane, run_after, batch_id, total, trace_context, unique_for, priority)
SELECT u.type, coalesce(u.payload, '{}'), u.dedupe_key,
       coalesce(u.lane, '00000000-0000-0000-0000-000000000000'), coalesce(u.run_after, now()),
       u.batch_id, u.total, u.trace_context, make_interval(secs => u.unique_for), u.priority
FROM unnest(:types::text[], :payloads::jsonb[], :dedupe_keys::text[], :lanes::uuid[], :run_afters::timestamptz[], :batch_ids::uuid[], :totals::int[],
            :trace_contexts::text[], :unique_fors::float8[], :priorities::smallint[])
     AS u(type, payload, dedupe_key, lane, run_after, batch_id, total, trace_context, unique_for, priority)
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING id, type
