-- GET /lanes: lanes by id, one keyset page strictly after lane :after (NULL: from the
-- start), :limit rows. Row-level security shows a tenant its own lanes, an admin every lane.
SELECT id, owner_id, priority, paused
FROM lanes
WHERE :after::uuid IS NULL OR id > :after
ORDER BY id
LIMIT :limit
