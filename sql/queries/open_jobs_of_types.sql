-- The oldest open job of each requested type in a lane.
SELECT DISTINCT ON (type) id, type
FROM jobs
WHERE lane = :lane AND type = ANY (:types::text[]) AND status IN ('pending', 'running')
ORDER BY type, created_at
