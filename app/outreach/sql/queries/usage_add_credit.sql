-- Use one credit of campaign $1's daily (UTC) allowance of $2 credits. Atomic, like
-- usage_add_page.sql. No row back: today's credits are spent.
INSERT INTO campaign_usage AS u (campaign_id, day, credits)
SELECT $1, (now() AT TIME ZONE 'UTC')::date, 1
WHERE 1 <= $2
ON CONFLICT (campaign_id, day) DO UPDATE
SET credits = u.credits + 1
WHERE u.credits + 1 <= $2
RETURNING u.credits
