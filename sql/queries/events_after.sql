-- A room's events after seq :after, under the replay rule: only the room's last :window
-- (EVENTS_REPLAY) can be replayed, so reading starts after greatest(:after, head - :window).
-- One row per event (at most :limit), each carrying the room's head; one row with NULL
-- event columns when nothing is newer; no row when the room has no events yet (or, for
-- a tenant, is not theirs: row-level security).
SELECT r.head_seq, e.seq, e.type, e.data, e.at
FROM event_rooms r
LEFT JOIN LATERAL (
    SELECT seq, type, data, at FROM events
    WHERE room = r.room AND seq > greatest(:after::bigint, r.head_seq - :window)
    ORDER BY seq
    LIMIT :limit
) e ON true
WHERE r.room = :room
ORDER BY e.seq
