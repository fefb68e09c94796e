-- Keep the draft for contact $2 of campaign $1 (one per contact; a second one is
-- skipped, and so is a contact of another campaign).
INSERT INTO drafts (campaign_id, contact_id, job_id, body, model, prompt_tokens, completion_tokens)
SELECT k.campaign_id, k.id, $3, $4, $5, $6, $7
FROM contacts k
WHERE k.id = $2 AND k.campaign_id = $1
ON CONFLICT (contact_id) DO NOTHING
RETURNING id
