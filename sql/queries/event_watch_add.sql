-- This listener (the connection running it) follows room :room live: writes to it NOTIFY.
INSERT INTO event_watch (room, listener) VALUES (:room, pg_backend_pid()) ON CONFLICT DO NOTHING
