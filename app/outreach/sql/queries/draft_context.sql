-- Everything a draft for contact :contact_id of campaign :campaign_id (the job's) is written from: the
-- contact, its campaign, the brief (if any), and the draft already written for it (if
-- any). Another campaign's contact is not found.
SELECT k.id AS contact_id, k.campaign_id, k.kind, k.value, k.handle, k.page_url,
       c.name AS campaign_name, c.url AS campaign_url,
       b.title, b.description, b.keywords, b.language,
       d.id AS draft_id
FROM contacts k
JOIN campaigns c ON c.id = k.campaign_id
LEFT JOIN briefs b ON b.campaign_id = k.campaign_id
LEFT JOIN drafts d ON d.contact_id = k.id
WHERE k.id = :contact_id AND k.campaign_id = :campaign_id
