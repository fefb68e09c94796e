-- Enqueue a job for each (:types, :periods, :dedupe_keys) row: a periodic stage's period
-- (the instant it begins) that app/pipeline/schedule.py found due, with the dedupe key of
-- its job. As in recurring_tick.sql the tick row decides who enqueues, once per period
-- however many runs start at once. A stage without catch-up gives each period the key
-- `periodic:<type>`, so a job still open from an earlier period (deferred, retrying, slow)
-- means this one adds none; one with catch-up gives each period its own key.
WITH due AS (
    SELECT * FROM unnest(:types::text[], :periods::timestamptz[], :dedupe_keys::text[])
        AS t(type, period, dedupe_key)
), ticked AS (
    INSERT INTO recurring_ticks (task, period)
    SELECT 'stage:' || type, period FROM due
    ORDER BY type, period  -- every scheduler takes the ticks' keys in one order: no deadlock
    ON CONFLICT (task, period) DO NOTHING
    RETURNING task, period
)
INSERT INTO jobs (type, payload, dedupe_key)
SELECT due.type, jsonb_build_object('period', due.period), due.dedupe_key
FROM ticked JOIN due ON ticked.task = 'stage:' || due.type AND ticked.period = due.period
ORDER BY due.type, due.period
ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING type
