-- Run by the holder of :type's claim turn once it has claimed: one start per job taken,
-- :keys each one's limit key, at the time the claim ended; and the type's starts that left
-- the window go.
WITH pruned AS (
    DELETE FROM stage_starts
    WHERE type = :type AND started_at <= clock_timestamp() - make_interval(secs => :window_seconds)
)
INSERT INTO stage_starts (type, key, started_at)
SELECT :type, k, clock_timestamp() FROM unnest(:keys::text[]) AS k
