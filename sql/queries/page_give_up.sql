-- The crawl of page $1 gave up (job $2): the page says so, with the job's last error,
-- unless it was recorded meanwhile.
UPDATE pages
SET state = 'failed', fetched_at = now(),
    note = coalesce((SELECT last_error FROM jobs WHERE id = $2), 'the crawl gave up')
WHERE id = $1 AND state = 'queued'
