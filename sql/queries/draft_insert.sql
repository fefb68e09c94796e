-- Keep the draft for contact $2 (one per contact; a second one is skipped).
INSERT INTO drafts (campaign_id, contact_id, job_id, body, model, prompt_tokens, completion_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (contact_id) DO NOTHING
RETURNING id
