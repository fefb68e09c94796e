UPDATE deadlines SET resolved_at = now()
WHERE id = :deadline_id AND resolved_at IS NULL AND breached_at IS NULL
RETURNING id
