-- Newest first over (at, id), after the keyset (:at, :last_id) when given. The keyset is one row
-- comparison that is never NULL, so audit_log_at_idx serves the page from the cursor on,
-- in generic plans too (a bound that could be NULL left them a filter over newer rows).
SELECT id, at, actor_kind, actor_id, table_name, op, row_id, old_row, new_row
FROM audit_log
WHERE (at, id) < (coalesce(:at::timestamptz, 'infinity'), coalesce(:last_id::bigint, 9223372036854775807))
  AND (:table::text IS NULL OR table_name = :table)
ORDER BY at DESC, id DESC
LIMIT :limit
