-- The oldest open job of each requested type in a lane.
SELECT DISTINCT ON (type) id, type
FROM jobs
WHERE lane = $1 AND type = ANY ($2::text[]) AND status IN ('pending', 'running')
ORDER BY type, created_at
