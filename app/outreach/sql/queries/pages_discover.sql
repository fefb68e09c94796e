-- Campaign $1 discovers the URLs $2 at depth $3. Only URLs it has never seen come
-- back: the unique (campaign_id, url) makes every page new exactly once, so each
-- gets exactly one crawl job however many pages link to it.
INSERT INTO pages (campaign_id, url, depth)
SELECT $1, u.url, $3 FROM unnest($2::text[]) WITH ORDINALITY AS u(url, n)
ORDER BY u.n
ON CONFLICT (campaign_id, url) DO NOTHING
RETURNING id, url, depth
