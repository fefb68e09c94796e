-- The paused stages and since when.
SELECT type, paused_at FROM paused_stages ORDER BY type
