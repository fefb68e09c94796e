-- When the periodic stages named in :types (their types) were last enqueued: seconds since
-- each one's newest tick (kept however old), a row only for those ticked at least once.
SELECT substr(task, length('stage:') + 1) AS type,
       extract(epoch FROM now() - max(created_at))::float8 AS seconds_ago
FROM recurring_ticks
WHERE task = ANY (ARRAY(SELECT 'stage:' || t FROM unnest(:types::text[]) AS t))
GROUP BY task
