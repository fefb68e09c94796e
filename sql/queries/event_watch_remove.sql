-- This listener no longer follows room :room.
DELETE FROM event_watch WHERE room = :room AND listener = pg_backend_pid()
