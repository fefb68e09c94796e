-- Campaign :campaign_id's page for the normalised URL :url, whatever its state.
SELECT id, campaign_id, url, depth, state, status_code, final_url, content_type, title, body, note
FROM pages WHERE campaign_id = :campaign_id AND url = :url
