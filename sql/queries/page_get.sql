SELECT id, campaign_id, url, depth, state, status_code, final_url, content_type, title, body, note
FROM pages WHERE id = $1
