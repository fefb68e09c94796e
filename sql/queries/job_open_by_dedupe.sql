-- The open job holding dedupe key $1 (what made an enqueue a no-op), if it is still open.
SELECT id, type, status, payload, dedupe_key, attempts, run_after, locked_at, last_error,
       run_id, batch_id, campaign_id, total, progress, created_at, finished_at
FROM jobs
WHERE dedupe_key = $1 AND status IN ('pending', 'running')
