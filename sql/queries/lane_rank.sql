-- An operator ranks lane $1: its priority ($2) and paused flag ($3), each kept when NULL.
-- The lanes trigger copies them onto the claim's index.
UPDATE lanes
SET priority = coalesce($2::int, priority), paused = coalesce($3::boolean, paused)
WHERE id = $1
RETURNING id, owner_id, priority, paused
