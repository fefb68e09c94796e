-- Campaign $1's page for the normalised URL $2, whatever its state.
SELECT id, campaign_id, url, depth, state, status_code, final_url, content_type, title, body, note
FROM pages WHERE campaign_id = $1 AND url = $2
