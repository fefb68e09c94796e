-- Use one page of campaign :campaign_id's daily (UTC) allowance of :daily_pages pages. Atomic: the WHERE
-- keeps the count at or under the allowance. No row back: today's pages are spent.
INSERT INTO campaign_usage AS u (campaign_id, day, pages)
SELECT :campaign_id, (now() AT TIME ZONE 'UTC')::date, 1
WHERE 1 <= :daily_pages
ON CONFLICT (campaign_id, day) DO UPDATE
SET pages = u.pages + 1
WHERE u.pages + 1 <= :daily_pages
RETURNING u.pages
