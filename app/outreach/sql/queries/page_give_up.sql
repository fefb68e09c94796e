-- The crawl (job $4) of campaign $1's page -- by id $2, or else by URL $3 -- gave up: the
-- page says so, with the job's last error, unless it was recorded meanwhile. Another
-- campaign's page is not touched.
UPDATE pages
SET state = 'failed', fetched_at = now(),
    note = coalesce((SELECT last_error FROM jobs WHERE id = $4), 'the crawl gave up')
WHERE campaign_id = $1 AND state = 'queued'
  AND CASE WHEN $2::uuid IS NOT NULL THEN id = $2::uuid ELSE url = $3::text END
