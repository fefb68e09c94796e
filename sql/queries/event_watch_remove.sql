-- This listener no longer follows room $1.
DELETE FROM event_watch WHERE room = $1 AND listener = pg_backend_pid()
