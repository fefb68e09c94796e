-- Delete up to $2 events that the replay rule no longer serves: each room keeps its
-- last $1 (EVENTS_REPLAY). Oldest first, bounded, so each statement stays short.
WITH doomed AS (
    SELECT e.room, e.seq
    FROM event_rooms r
    CROSS JOIN LATERAL (
        SELECT room, seq FROM events
        WHERE room = r.room AND seq <= r.head_seq - $1
        ORDER BY seq
        LIMIT $2
    ) e
    LIMIT $2
)
DELETE FROM events e USING doomed d WHERE e.room = d.room AND e.seq = d.seq
