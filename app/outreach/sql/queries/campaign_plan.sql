-- The plan a campaign's work runs under: its owner's subscription.
-- ownerless: the campaign has no owner; plan NULL: the owner has no subscription.
SELECT c.user_id IS NULL AS ownerless, s.plan
FROM campaigns c
LEFT JOIN subscriptions s ON s.user_id = c.user_id
WHERE c.id = :campaign_id
