-- A run row never finished long after the platform limit ($1 seconds) belongs to an
-- invocation that was killed: close it as an error so the log does not lie.
UPDATE runs
SET stop_reason = 'error', finished_at = now(),
    error = 'the invocation ended without finishing its run (killed or timed out)'
WHERE finished_at IS NULL AND started_at < now() - make_interval(secs => $1)
RETURNING id
