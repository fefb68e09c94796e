-- The events of what one NOTIFY announced: for each room :rooms[k], its seqs from :firsts[k] to
-- :lasts[k], in order, at most :limit a room (read once per notice by the process's event hub, as
-- the tables' owner, whatever the number of rooms).
SELECT r.room, e.seq, e.type, e.data, e.at
FROM unnest(:rooms::text[], :firsts::bigint[], :lasts::bigint[]) AS r(room, first, last)
CROSS JOIN LATERAL (
    SELECT seq, type, data, at FROM events
    WHERE room = r.room AND seq BETWEEN r.first AND r.last
    ORDER BY seq
    LIMIT :limit
) e
ORDER BY r.room, e.seq
