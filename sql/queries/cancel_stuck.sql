-- Cancel one job of cancel_stuck_candidates.sql. The WHERE repeats its test, so of two
-- sweeps (or a sweep and a claim) racing for the job exactly one gets the row back (and
-- runs the cancelled hook); a job a live run holds again is that run's to end.
UPDATE jobs
SET status = 'cancelled', finished_at = now(), locked_at = NULL
WHERE id = :job_id AND type = :type AND cancel_requested_at IS NOT NULL
  AND (status = 'pending'
       OR (status = 'running' AND locked_at < now() - make_interval(secs => :lease_seconds)))
RETURNING id, type, payload, attempts, lane, run_id, batch_id, dedupe_key, created_at
