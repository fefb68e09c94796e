-- Give every open batch the status its children say, in one statement:
--   all children terminal: stopped (any cancelled), else completed (none failed), failed
--   (all failed), partially_failed;
--   any child started (claimed at least once): running (a waiting child has not started).
-- The UPDATE repeats the "still open" test, so when two runs reconcile at once only one
-- of them moves a batch to its final status (and sends its notification).
WITH counts AS (
    SELECT j.batch_id,
           count(*)                                                    AS n,
           count(*) FILTER (WHERE j.status = 'done')                   AS done,
           count(*) FILTER (WHERE j.status = 'failed')                 AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled')              AS cancelled,
           count(*) FILTER (WHERE j.status IN ('pending', 'waiting') AND j.attempts = 0) AS not_started
    FROM batches b
    JOIN jobs j ON j.batch_id = b.id
    WHERE b.status IN ('pending', 'running')
    GROUP BY j.batch_id
), next AS (
    SELECT batch_id,
           CASE WHEN done + failed + cancelled < n THEN CASE WHEN not_started < n THEN 'running' ELSE 'pending' END
                WHEN cancelled > 0 THEN 'stopped'
                WHEN failed = 0 THEN 'completed'
                WHEN done = 0 THEN 'failed'
                ELSE 'partially_failed' END AS status,
           done + failed + cancelled = n AS finished
    FROM counts
)
UPDATE batches b
SET status = next.status, updated_at = now(),
    finished_at = CASE WHEN next.finished THEN now() END
FROM next
WHERE b.id = next.batch_id AND b.status IN ('pending', 'running') AND b.status <> next.status
RETURNING b.id, b.lane, b.status, next.finished
