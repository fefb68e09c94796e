-- Campaign $1's contacts newest first (the API's keyset pages), before the keyset
-- ($2, $3) (created_at, id) when given, at most $4; with each one's draft, if any. The
-- keyset is never NULL, so contacts_listing_idx serves the page from the cursor on.
SELECT k.id, k.kind, k.value, k.handle, k.page_url, k.created_at,
       d.id AS draft_id, d.body AS draft, d.model AS draft_model, d.created_at AS drafted_at
FROM contacts k
LEFT JOIN drafts d ON d.contact_id = k.id
WHERE k.campaign_id = $1
  AND (k.created_at, k.id) < (coalesce($2::timestamptz, 'infinity'),
                               coalesce($3::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
ORDER BY k.created_at DESC, k.id DESC
LIMIT $4
