-- The jobs waiting in the caller's own lanes (migration 0029).
SELECT app_waiting_jobs()
