-- An operator resumes stage :type: its jobs are claimed again (a waiting worker is woken by
-- paused_stages_notify_resumed).
DELETE FROM paused_stages WHERE type = :type
