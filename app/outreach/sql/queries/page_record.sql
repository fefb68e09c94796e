-- What fetching page $1 of campaign $9 found. $2 state, $3 HTTP status, $4 final URL,
-- $5 content type, $6 title, $7 body, $8 note. Another campaign's page is not touched.
UPDATE pages
SET state = $2, status_code = $3, final_url = $4, content_type = $5, title = $6, body = $7,
    note = $8, fetched_at = now()
WHERE id = $1 AND campaign_id = $9
RETURNING id
