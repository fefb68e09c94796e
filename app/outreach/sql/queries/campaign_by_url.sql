-- Owner $1's campaign on site $2 (on a database that had repeats, the oldest).
SELECT id, user_id, name, url, status, created_at
FROM campaigns
WHERE user_id = $1 AND url = $2
ORDER BY duplicate, created_at, id
LIMIT 1
