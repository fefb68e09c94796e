-- Keep the draft for contact :contact_id of campaign :campaign_id (one per contact; a second one is
-- skipped, and so is a contact of another campaign).
INSERT INTO drafts (campaign_id, contact_id, job_id, body, model, prompt_tokens, completion_tokens)
SELECT k.campaign_id, k.id, :job_id, :body, :model, :prompt_tokens, :completion_tokens
FROM contacts k
WHERE k.id = :contact_id AND k.campaign_id = :campaign_id
ON CONFLICT (contact_id) DO NOTHING
RETURNING id
