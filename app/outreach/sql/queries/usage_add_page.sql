-- Use one page of campaign $1's daily (UTC) allowance of $2 pages. Atomic: the WHERE
-- keeps the count at or under the allowance. No row back: today's pages are spent.
INSERT INTO campaign_usage AS u (campaign_id, day, pages)
SELECT $1, (now() AT TIME ZONE 'UTC')::date, 1
WHERE 1 <= $2
ON CONFLICT (campaign_id, day) DO UPDATE
SET pages = u.pages + 1
WHERE u.pages + 1 <= $2
RETURNING u.pages
