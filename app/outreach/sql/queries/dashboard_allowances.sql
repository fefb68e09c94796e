-- The dashboard's allowances: each account the caller can see (row-level security: a
-- tenant itself, an admin everyone; at most :limit), its plan (NULL: the default plan), what
-- it spent today (UTC) of its share of the shared quota, and its campaigns' pages and
-- drafts today.
SELECT u.id, u.email, s.plan,
       coalesce(q.spent, 0) AS quota_spent,
       coalesce(c.pages, 0) AS pages, coalesce(c.credits, 0) AS credits
FROM users u
LEFT JOIN subscriptions s ON s.user_id = u.id
LEFT JOIN quota_user_ledger q ON q.user_id = u.id AND q.day = (now() AT TIME ZONE 'UTC')::date
LEFT JOIN LATERAL (
    SELECT sum(g.pages)::bigint AS pages, sum(g.credits)::bigint AS credits
    FROM campaigns k JOIN campaign_usage g ON g.campaign_id = k.id
    WHERE k.user_id = u.id AND g.day = (now() AT TIME ZONE 'UTC')::date
) c ON true
ORDER BY u.email
LIMIT :limit
