-- Delete up to :limit events that the replay rule no longer serves: each room keeps its
-- last :window (EVENTS_REPLAY). Oldest first, bounded, so each statement stays short.
WITH doomed AS (
    SELECT e.room, e.seq
    FROM event_rooms r
    CROSS JOIN LATERAL (
        SELECT room, seq FROM events
        WHERE room = r.room AND seq <= r.head_seq - :window
        ORDER BY seq
        LIMIT :limit
    ) e
    LIMIT :limit
)
DELETE FROM events e USING doomed d WHERE e.room = d.room AND e.seq = d.seq
