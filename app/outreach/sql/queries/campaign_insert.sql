-- A new active campaign for owner :owner_id, named :name, on site :url; no row when the owner has a
-- campaign on that site already (campaigns_owner_url_key: campaign_by_url.sql finds it).
INSERT INTO campaigns (user_id, name, url) VALUES (:owner_id, :name, :url)
ON CONFLICT (user_id, url) WHERE NOT duplicate DO NOTHING
RETURNING id, user_id, name, url, status, created_at
