-- Enqueue each recurring task whose current period has no tick yet. :tasks task names,
-- :intervals their intervals in seconds. The tick row decides who enqueues (once per period,
-- however many schedulers run); the open-job dedupe key keeps a slow task from piling up.
WITH due AS (
    SELECT t.task, to_timestamp(floor(extract(epoch FROM now()) / t.every) * t.every) AS period
    FROM unnest(:tasks::text[], :intervals::float8[]) AS t(task, every)
), ticked AS (
    INSERT INTO recurring_ticks (task, period)
    SELECT task, period FROM due
    ON CONFLICT (task, period) DO NOTHING
    RETURNING task
)
INSERT INTO jobs (type, payload, dedupe_key)
SELECT 'maintenance', jsonb_build_object('task', task), 'maintenance:' || task FROM ticked
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING payload ->> 'task' AS task
