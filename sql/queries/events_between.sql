-- The events of what one NOTIFY announced: for each room $1[k], its seqs from $2[k] to
-- $3[k], in order, at most $4 a room (read once per notice by the process's event hub, as
-- the tables' owner, whatever the number of rooms).
SELECT r.room, e.seq, e.type, e.data, e.at
FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(room, first, last)
CROSS JOIN LATERAL (
    SELECT seq, type, data, at FROM events
    WHERE room = r.room AND seq BETWEEN r.first AND r.last
    ORDER BY seq
    LIMIT $4
) e
ORDER BY r.room, e.seq
