-- A run row whose heartbeat stopped more than :silent_seconds seconds ago belongs to an invocation that
-- was killed, timed out or lost the database for good: close it as an error so the log
-- does not lie. Its counts are those of its last heartbeat.
UPDATE runs
SET stop_reason = 'error', finished_at = now(),
    error = format('abandoned: no heartbeat since %s (the invocation was killed, timed out '
                   'or lost the database); counts as of that heartbeat',
                   to_char(heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
WHERE finished_at IS NULL AND heartbeat_at < now() - make_interval(secs => :silent_seconds)
RETURNING id
