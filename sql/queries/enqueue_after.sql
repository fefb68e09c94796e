-- Enqueue one job that waits for others (:parents, job ids): 'waiting' until every one of
-- them has ended done (the jobs_wait_for_parents trigger, migration 0046, decides and
-- refuses unknown ids); :run_anyway: a parent that fails or is cancelled releases it too
-- instead of cancelling it. Otherwise as enqueue.sql: a duplicate dedupe key is a no-op.
INSERT INTO jobs (type, payload, dedupe_key, lane, run_after, trace_context, unique_for, parents, run_anyway, priority)
VALUES (:type, coalesce(:payload::jsonb, '{}'), :dedupe_key, coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'),
        coalesce(:run_after::timestamptz, now()), :trace_context, make_interval(secs => :unique_for::float8),
        :parents::uuid[], :run_anyway, :priority::smallint)
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING id
