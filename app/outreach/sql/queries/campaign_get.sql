-- One campaign as people see it: owner, plan, brief, and what the pipeline found so far.
SELECT c.id, c.name, c.url, c.status, c.created_at,
       u.email AS owner, c.user_id IS NULL AS ownerless, s.plan,
       b.title AS brief_title, b.description AS brief_description, b.keywords AS brief_keywords,
       b.language AS brief_language, b.note AS brief_note, b.updated_at AS brief_updated_at,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id)::int AS pages_found,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id AND p.state = 'fetched')::int
           AS pages_fetched,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id AND p.state = 'queued')::int
           AS pages_queued,
       (SELECT count(*) FROM contacts k WHERE k.campaign_id = c.id)::int AS contacts,
       (SELECT count(*) FROM drafts d WHERE d.campaign_id = c.id)::int AS drafts
FROM campaigns c
LEFT JOIN users u ON u.id = c.user_id
LEFT JOIN subscriptions s ON s.user_id = c.user_id
LEFT JOIN briefs b ON b.campaign_id = c.id
WHERE c.id = :campaign_id
