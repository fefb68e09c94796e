-- New contacts, from parallel arrays: campaign, kind, value, handle, page id, page URL.
-- A value a campaign already has is skipped; only the new contacts come back.
INSERT INTO contacts (campaign_id, kind, value, handle, page_id, page_url)
SELECT u.campaign_id, u.kind, u.value, u.handle, u.page_id, u.page_url
FROM unnest(:campaign_ids::uuid[], :kinds::text[], :values::text[], :handles::text[], :page_ids::uuid[], :page_urls::text[]) WITH ORDINALITY
     AS u(campaign_id, kind, value, handle, page_id, page_url, n)
ORDER BY u.n
ON CONFLICT (campaign_id, value) DO NOTHING
RETURNING id, campaign_id, kind, value
