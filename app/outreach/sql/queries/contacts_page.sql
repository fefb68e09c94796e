-- Campaign :campaign_id's contacts newest first (the API's keyset pages), before the keyset
-- (:at, :last_id) (created_at, id) when given, at most :limit; with each one's draft, if any. The
-- keyset is never NULL, so contacts_listing_idx serves the page from the cursor on.
SELECT k.id, k.kind, k.value, k.handle, k.page_url, k.created_at,
       d.id AS draft_id, d.body AS draft, d.model AS draft_model, d.created_at AS drafted_at
FROM contacts k
LEFT JOIN drafts d ON d.contact_id = k.id
WHERE k.campaign_id = :campaign_id
  AND (k.created_at, k.id) < (coalesce(:at::timestamptz, 'infinity'),
                               coalesce(:last_id::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
ORDER BY k.created_at DESC, k.id DESC
LIMIT :limit
