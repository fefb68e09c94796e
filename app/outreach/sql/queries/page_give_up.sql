-- The crawl (job :job_id) of campaign :campaign_id's page -- by id :page_id, or else by URL :url -- gave up: the
-- page says so, with the job's last error, unless it was recorded meanwhile. Another
-- campaign's page is not touched.
UPDATE pages
SET state = 'failed', fetched_at = now(),
    note = coalesce((SELECT last_error FROM jobs WHERE id = :job_id), 'the crawl gave up')
WHERE campaign_id = :campaign_id AND state = 'queued'
  AND CASE WHEN :page_id::uuid IS NOT NULL THEN id = :page_id::uuid ELSE url = :url::text END
