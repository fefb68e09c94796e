-- Newest first over (at, id), after the keyset ($1, $2) when given.
SELECT id, at, actor_kind, actor_id, table_name, op, row_id, old_row, new_row
FROM audit_log
WHERE ($1::timestamptz IS NULL OR (at, id) < ($1, $2::bigint))
  AND ($3::text IS NULL OR table_name = $3)
ORDER BY at DESC, id DESC
LIMIT $4
