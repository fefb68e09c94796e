-- An operator ranks lane :lane: its priority (:priority) and paused flag (:paused), each kept when NULL.
-- The operator's pause is also a hold (`held`), which a plug-in's ranking keeps; the
-- operator's resume lifts both. The lanes trigger copies them onto the claim's index.
UPDATE lanes
SET priority = coalesce(:priority::int, priority), paused = coalesce(:paused::boolean, paused),
    held = coalesce(:paused::boolean, held)
WHERE id = :lane
RETURNING id, owner_id, priority, paused
