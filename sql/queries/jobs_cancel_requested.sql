-- The cancel watch's look, about once a second per run: the jobs run :run_id holds that a
-- person asked to cancel. Off jobs_cancel_requested_idx, which holds only open jobs with
-- a request: a handful of entries, however many jobs run.
SELECT id FROM jobs
WHERE run_id = :run_id AND cancel_requested_at IS NOT NULL AND status = 'running'
