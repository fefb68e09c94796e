-- Campaign :campaign_id discovers the URLs :urls at depth :depth. Only URLs it has never seen come
-- back: the unique (campaign_id, url) makes every page new exactly once, so each
-- gets exactly one crawl job however many pages link to it.
INSERT INTO pages (campaign_id, url, depth)
SELECT :campaign_id, u.url, :depth FROM unnest(:urls::text[]) WITH ORDINALITY AS u(url, n)
ORDER BY u.n
ON CONFLICT (campaign_id, url) DO NOTHING
RETURNING id, url, depth
