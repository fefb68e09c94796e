-- What fetching page :page_id of campaign :campaign_id found. :state state, :status_code HTTP status, :final_url final URL,
-- :content_type content type, :title title, :body body, :note note. Another campaign's page is not touched.
UPDATE pages
SET state = :state, status_code = :status_code, final_url = :final_url, content_type = :content_type, title = :title, body = :body,
    note = :note, fetched_at = now()
WHERE id = :page_id AND campaign_id = :campaign_id
RETURNING id
