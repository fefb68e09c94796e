-- Gather jobs' statistics now (see jobs_statistics_missing.sql). SKIP_LOCKED: an ANALYZE
-- or VACUUM already under way (another run's, autovacuum's) is doing it; do not wait.
ANALYZE (SKIP_LOCKED) jobs
