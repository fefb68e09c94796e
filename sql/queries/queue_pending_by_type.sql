-- An admin's pending jobs per type, exact however many: from the lane counters
-- (app_pending_by_type, migration 0067), never a count of jobs.
SELECT type, pending FROM app_pending_by_type()
