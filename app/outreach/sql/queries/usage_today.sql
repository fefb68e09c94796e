-- What campaign :campaign_id used today (UTC) of its daily allowances.
SELECT coalesce(u.pages, 0) AS pages, coalesce(u.credits, 0) AS credits
FROM (SELECT 1) one
LEFT JOIN campaign_usage u ON u.campaign_id = :campaign_id AND u.day = (now() AT TIME ZONE 'UTC')::date
