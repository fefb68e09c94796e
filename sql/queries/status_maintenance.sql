-- When some deployment last enqueued the recurring maintenance (any task's tick; each
-- task's newest is kept however old): NULL when none ever did.
SELECT extract(epoch FROM now() - max(created_at))::float8 AS seconds_ago FROM recurring_ticks
