-- This listener (the connection running it) follows room $1 live: writes to it NOTIFY.
INSERT INTO event_watch (room, listener) VALUES ($1, pg_backend_pid()) ON CONFLICT DO NOTHING
