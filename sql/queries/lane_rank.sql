-- An operator ranks lane $1: its priority ($2) and paused flag ($3), each kept when NULL.
-- The operator's pause is also a hold (`held`), which a plug-in's ranking keeps; the
-- operator's resume lifts both. The lanes trigger copies them onto the claim's index.
UPDATE lanes
SET priority = coalesce($2::int, priority), paused = coalesce($3::boolean, paused),
    held = coalesce($3::boolean, held)
WHERE id = $1
RETURNING id, owner_id, priority, paused
