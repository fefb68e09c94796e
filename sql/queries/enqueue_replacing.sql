-- Enqueue one job, or debounce: when a pending job of the same type holds the dedupe key in
-- the lane, that job takes this one's payload, due time and window instead (it keeps its id,
-- its batch and its place in the lane's queue: its age and its priority).
-- A job holding the key that is running, of another type, or ended within its window is
-- left as it is: no row comes back.
-- created: whether the row is the new job (its id is made first, so it can be told apart).
-- :lane NULL: the default (all-zero) lane; :run_after NULL: now; :unique_for NULL: no window.
-- :trace_context: the enqueuer's W3C traceparent, or NULL; a debounced job takes the newest.
WITH fresh AS (SELECT time_ordered_uuid() AS id)
INSERT INTO jobs (id, type, payload, dedupe_key, lane, run_after, batch_id, total, unique_for, trace_context, priority)
SELECT fresh.id, :type, coalesce(:payload::jsonb, '{}'), :dedupe_key,
       coalesce(:lane::uuid, '00000000-0000-0000-0000-000000000000'), coalesce(:run_after::timestamptz, now()),
       :batch_id, :total, make_interval(secs => :unique_for::float8), :trace_context, :priority::smallint
FROM fresh
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running')
DO UPDATE SET payload = excluded.payload, run_after = excluded.run_after, unique_for = excluded.unique_for,
              trace_context = coalesce(excluded.trace_context, jobs.trace_context)
    WHERE jobs.status = 'pending' AND jobs.type = excluded.type
RETURNING id, id = (SELECT id FROM fresh) AS created
