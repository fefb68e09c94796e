-- GET /lanes: lanes by id, one keyset page strictly after lane $1 (NULL: from the
-- start), $2 rows. Row-level security shows a tenant its own lanes, an admin every lane.
SELECT id, owner_id, priority, paused
FROM lanes
WHERE $1::uuid IS NULL OR id > $1
ORDER BY id
LIMIT $2
