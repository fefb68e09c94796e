-- Keep campaign :campaign_id's brief (one per campaign; a newer brief replaces the older).
INSERT INTO briefs (campaign_id, url, final_url, status_code, title, description, keywords, language, note)
VALUES (:campaign_id, :url, :final_url, :status_code, :title, :description, :keywords, :language, :note)
ON CONFLICT (campaign_id) DO UPDATE
SET url = excluded.url, final_url = excluded.final_url, status_code = excluded.status_code,
    title = excluded.title, description = excluded.description, keywords = excluded.keywords,
    language = excluded.language, note = excluded.note, updated_at = now()
