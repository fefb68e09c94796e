-- Owner :owner_id's campaign on site :url (on a database that had repeats, the oldest).
SELECT id, user_id, name, url, status, created_at
FROM campaigns
WHERE user_id = :owner_id AND url = :url
ORDER BY duplicate, created_at, id
LIMIT 1
