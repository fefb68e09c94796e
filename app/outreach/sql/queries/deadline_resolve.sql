UPDATE deadlines SET resolved_at = now()
WHERE id = $1 AND resolved_at IS NULL AND breached_at IS NULL
RETURNING id
