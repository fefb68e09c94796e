-- The fetched pages $1 with their text, for the extract stage.
SELECT id, campaign_id, url, coalesce(final_url, url) AS final_url, content_type, body
FROM pages
WHERE id = ANY ($1::uuid[]) AND state = 'fetched' AND body IS NOT NULL
