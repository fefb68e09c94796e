-- A room's events after seq $2, under the replay rule: only the room's last $3
-- (EVENTS_REPLAY) can be replayed, so reading starts after greatest($2, head - $3).
-- One row per event (at most $4), each carrying the room's head; one row with NULL
-- event columns when nothing is newer; no row when the room has no events yet (or, for
-- a tenant, is not theirs: row-level security).
SELECT r.head_seq, e.seq, e.type, e.data, e.at
FROM event_rooms r
LEFT JOIN LATERAL (
    SELECT seq, type, data, at FROM events
    WHERE room = r.room AND seq > greatest($2::bigint, r.head_seq - $3)
    ORDER BY seq
    LIMIT $4
) e ON true
WHERE r.room = $1
ORDER BY e.seq
