-- What each campaign did from :since until :until (the digest's day): pages fetched,
-- contacts found, drafts written. Campaigns that did none of it are left out.
WITH fetched AS (
    SELECT campaign_id, count(*) AS n FROM pages
    WHERE state = 'fetched' AND fetched_at >= :since::timestamptz AND fetched_at < :until::timestamptz
    GROUP BY campaign_id
), found AS (
    SELECT campaign_id, count(*) AS n FROM contacts
    WHERE created_at >= :since::timestamptz AND created_at < :until::timestamptz
    GROUP BY campaign_id
), written AS (
    SELECT campaign_id, count(*) AS n FROM drafts
    WHERE created_at >= :since::timestamptz AND created_at < :until::timestamptz
    GROUP BY campaign_id
)
SELECT c.id AS campaign_id, c.name, coalesce(fetched.n, 0) AS pages_fetched,
       coalesce(found.n, 0) AS contacts_found, coalesce(written.n, 0) AS drafts_written
FROM campaigns c
LEFT JOIN fetched ON fetched.campaign_id = c.id
LEFT JOIN found ON found.campaign_id = c.id
LEFT JOIN written ON written.campaign_id = c.id
WHERE fetched.n IS NOT NULL OR found.n IS NOT NULL OR written.n IS NOT NULL
ORDER BY c.created_at, c.id
