-- Enqueue a job of each periodic stage whose current period has no tick yet. :types the
-- stages' types, :periods their periods in seconds (periods start on multiples of it since the
-- Unix epoch, UTC). As in recurring_tick.sql the tick row decides who enqueues, once per
-- period however many runs start at once; the dedupe key keeps one open job per stage,
-- so a job still waiting or running from an earlier period (deferred, retrying, slow)
-- means this period adds none, and a pipeline that was down does not catch up a backlog.
WITH due AS (
    SELECT t.type, to_timestamp(floor(extract(epoch FROM now()) / t.every) * t.every) AS period
    FROM unnest(:types::text[], :periods::float8[]) AS t(type, every)
), ticked AS (
    INSERT INTO recurring_ticks (task, period)
    SELECT 'stage:' || type, period FROM due
    ON CONFLICT (task, period) DO NOTHING
    RETURNING task, period
)
INSERT INTO jobs (type, payload, dedupe_key)
SELECT substr(task, length('stage:') + 1), jsonb_build_object('period', period),
       'periodic:' || substr(task, length('stage:') + 1)
FROM ticked
ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING type
