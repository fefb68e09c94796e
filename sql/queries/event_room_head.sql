-- The last seq of room :room (0 when it has none yet).
SELECT coalesce((SELECT head_seq FROM event_rooms WHERE room = :room), 0)
