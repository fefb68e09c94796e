-- The database's clock (or :at, an instant to schedule as of, when not NULL), and for each
-- periodic stage named in :types (their types) its newest tick: the period last enqueued
-- and when (NULL: never). Every scheduler reads the one clock, so all agree on which
-- period is current; a task's newest tick is kept however old (prune_bookkeeping.sql).
SELECT t.type, coalesce(:at::timestamptz, now()) AS now, last.period AS last_period, last.created_at AS last_enqueued_at
FROM unnest(:types::text[]) AS t(type)
LEFT JOIN LATERAL (
    SELECT period, created_at FROM recurring_ticks
    WHERE task = 'stage:' || t.type
    ORDER BY period DESC LIMIT 1
) last ON true
