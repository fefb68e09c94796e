-- Use one credit of campaign :campaign_id's daily (UTC) allowance of :daily_credits credits. Atomic, like
-- usage_add_page.sql. No row back: today's credits are spent.
INSERT INTO campaign_usage AS u (campaign_id, day, credits)
SELECT :campaign_id, (now() AT TIME ZONE 'UTC')::date, 1
WHERE 1 <= :daily_credits
ON CONFLICT (campaign_id, day) DO UPDATE
SET credits = u.credits + 1
WHERE u.credits + 1 <= :daily_credits
RETURNING u.credits
