-- Finished runs per (trigger, stop reason), for /metrics: how many and their seconds,
-- per duration bucket (bounds_at_or_above: the run counts in the `le` buckets of that
-- many of the largest bounds). Read from run_totals, kept by a trigger as runs finish
-- (migration 0022), never from the runs themselves; the sums only grow.
SELECT trigger, stop_reason, bounds_at_or_above, runs, seconds::float8 AS seconds
FROM run_totals
WHERE runs <> 0
