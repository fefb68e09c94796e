-- Page :page_id of campaign :campaign_id (the job's): another campaign's page is not found.
SELECT id, campaign_id, url, depth, state, status_code, final_url, content_type, title, body, note
FROM pages WHERE id = :page_id AND campaign_id = :campaign_id
