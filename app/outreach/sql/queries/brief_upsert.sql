-- Keep campaign $1's brief (one per campaign; a newer brief replaces the older).
INSERT INTO briefs (campaign_id, url, final_url, status_code, title, description, keywords, language, note)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (campaign_id) DO UPDATE
SET url = excluded.url, final_url = excluded.final_url, status_code = excluded.status_code,
    title = excluded.title, description = excluded.description, keywords = excluded.keywords,
    language = excluded.language, note = excluded.note, updated_at = now()
