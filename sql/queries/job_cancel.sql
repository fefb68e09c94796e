-- Cancel job :job_id while it is open. A pending or waiting job is cancelled now (the jobs
-- waiting for it are cancelled in turn, or run anyway: migration 0046); a running one keeps
-- running, with the request noted (cancel_requested_at): the run that holds it ends it
-- (app/pipeline/cancel_watch.py), never this statement, so its holder is not stomped. The
-- row as it is now (status 'cancelled', or 'running' with the request); none when the job
-- had already ended (or does not exist). A claim that locked the row first wins: the job
-- is then running, and the request waits for its holder.
UPDATE jobs
SET status              = CASE WHEN status IN ('pending', 'waiting') THEN 'cancelled' ELSE status END,
    finished_at         = CASE WHEN status IN ('pending', 'waiting') THEN now() ELSE finished_at END,
    locked_at           = CASE WHEN status IN ('pending', 'waiting') THEN NULL ELSE locked_at END,
    cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE id = :job_id AND status IN ('pending', 'running', 'waiting')
RETURNING id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
          run_id, batch_id, lane, priority, total, progress, created_at, finished_at, cancel_requested_at
