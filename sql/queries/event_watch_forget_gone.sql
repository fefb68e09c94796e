-- Forget the rooms of listeners whose connections are gone (a process that died).
DELETE FROM event_watch WHERE listener NOT IN (SELECT pid FROM pg_stat_activity)
