-- When some deployment last enqueued the recurring maintenance (any task's tick; ticks
-- older than two days are pruned): NULL when none is kept.
SELECT extract(epoch FROM now() - max(created_at))::float8 AS seconds_ago FROM recurring_ticks
