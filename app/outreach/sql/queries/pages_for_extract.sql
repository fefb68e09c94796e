-- The pages named by extract jobs, each looked up in its own job's campaign: :page_ids page ids
-- and :campaign_ids the jobs' campaigns, pairwise. A page of another campaign (or a NULL campaign)
-- does not come back. `readable`: fetched, with text to read.
SELECT p.id, p.campaign_id, p.url, coalesce(p.final_url, p.url) AS final_url, p.content_type,
       p.body, (p.state = 'fetched' AND p.body IS NOT NULL) AS readable
FROM (SELECT DISTINCT page_id, campaign_id FROM unnest(:page_ids::uuid[], :campaign_ids::uuid[]) AS u(page_id, campaign_id)) j
JOIN pages p ON p.id = j.page_id AND p.campaign_id = j.campaign_id
