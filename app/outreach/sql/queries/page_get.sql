-- Page $1 of campaign $2 (the job's): another campaign's page is not found.
SELECT id, campaign_id, url, depth, state, status_code, final_url, content_type, title, body, note
FROM pages WHERE id = $1 AND campaign_id = $2
