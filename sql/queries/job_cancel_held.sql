-- End a job cancelled by the run that holds it, once its handler has stopped: only while
-- run :run_id still holds job :job_id and a cancel was asked for (a run that lost its
-- lease changes nothing). The stage's cancelled hook runs in the same transaction.
UPDATE jobs
SET status = 'cancelled', finished_at = now(), locked_at = NULL
WHERE id = :job_id AND run_id = :run_id AND status = 'running' AND cancel_requested_at IS NOT NULL
RETURNING id, type, payload, attempts, lane, run_id, batch_id, dedupe_key, created_at
