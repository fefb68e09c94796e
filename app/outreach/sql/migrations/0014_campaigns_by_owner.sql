-- A tenant's GET /campaigns reads its own campaigns off this index, newest first, instead
-- of every campaign with row-level security dropping the others' (34-50 ms beside
-- another tenant's 50,000 campaigns, growing with them). It also serves what the
-- (user_id) index it replaces did.
CREATE INDEX campaigns_owner_listing_idx ON campaigns (user_id, created_at, id);
DROP INDEX IF EXISTS campaigns_user_idx;
