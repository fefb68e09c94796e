-- The last seq of room $1 (0 when it has none yet).
SELECT coalesce((SELECT head_seq FROM event_rooms WHERE room = $1), 0)
