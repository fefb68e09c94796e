-- The events of room $1 with seq from $2 to $3, in order, at most $4 (what one NOTIFY
-- announced; read once per room by the process's event hub, as the tables' owner).
SELECT seq, type, data, at FROM events
WHERE room = $1 AND seq BETWEEN $2 AND $3
ORDER BY seq
LIMIT $4
