-- A page of campaigns, newest first over (created_at, id): those row-level security lets
-- the caller see (a user's own; every one with an admin key). :status: only this status, or
-- NULL; :at, :last_id: after this keyset (created_at, id), or NULL; :limit: how many; :own: the caller
-- is a tenant. The keyset is one row comparison that is never NULL.
--
-- An admin's page walks campaigns_listing_idx from the cursor on. A tenant's reads its
-- own campaigns off campaigns_owner_listing_idx (the owner named by a one-value range, so
-- the planner keeps to that index's order), never another tenant's. The branch not taken
-- is switched off before it runs.
WITH page AS (
    (SELECT c.* FROM campaigns c
     WHERE NOT :own::boolean AND (:status::text IS NULL OR c.status = :status)
       AND (c.created_at, c.id) < (coalesce(:at::timestamptz, 'infinity'),
                                   coalesce(:last_id::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
     ORDER BY c.created_at DESC, c.id DESC
     LIMIT :limit)
    UNION ALL
    (SELECT c.* FROM campaigns c
     WHERE :own AND c.user_id >= (SELECT app_user_id()) AND c.user_id <= (SELECT app_user_id())
       AND (:status IS NULL OR c.status = :status)
       AND (c.created_at, c.id) < (coalesce(:at, 'infinity'),
                                   coalesce(:last_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
     ORDER BY c.user_id DESC, c.created_at DESC, c.id DESC
     LIMIT :limit)
)
SELECT c.id, c.name, c.url, c.status, c.created_at,
       u.email AS owner, c.user_id IS NULL AS ownerless, s.plan,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id)::int AS pages_found,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id AND p.state = 'fetched')::int
           AS pages_fetched,
       (SELECT count(*) FROM pages p WHERE p.campaign_id = c.id AND p.state = 'queued')::int
           AS pages_queued,
       (SELECT count(*) FROM contacts k WHERE k.campaign_id = c.id)::int AS contacts,
       (SELECT count(*) FROM drafts d WHERE d.campaign_id = c.id)::int AS drafts
FROM page c
LEFT JOIN users u ON u.id = c.user_id
LEFT JOIN subscriptions s ON s.user_id = c.user_id
ORDER BY c.created_at DESC, c.id DESC
