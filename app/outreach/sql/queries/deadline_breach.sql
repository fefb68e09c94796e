-- Latch the breach: the WHERE makes it happen once, however many runs see the deadline.
UPDATE deadlines SET breached_at = now()
WHERE id = :deadline_id AND breached_at IS NULL AND resolved_at IS NULL AND due_at <= now()
RETURNING id, subject
