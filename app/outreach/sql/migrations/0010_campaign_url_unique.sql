-- One campaign per owner and URL: adding the same URL again for the same owner finds the
-- campaign that is there (POST /campaigns answers 200 with created false) instead of
-- starting a second crawl of the same site. The index is what makes concurrent identical
-- requests end with one campaign.
--
-- A database from before may hold repeats already. They keep everything they found:
-- all but the oldest of each owner and URL are marked `duplicate` and left out of the
-- rule, so the oldest is the one a new request finds. Campaigns without an owner (made
-- with plain SQL) are not covered: a NULL owner never equals another.
ALTER TABLE campaigns ADD COLUMN IF NOT EXISTS duplicate boolean NOT NULL DEFAULT false;

UPDATE campaigns c SET duplicate = true
FROM (SELECT id, row_number() OVER (PARTITION BY user_id, url ORDER BY created_at, id) AS nth
      FROM campaigns
      WHERE user_id IS NOT NULL AND url IS NOT NULL AND NOT duplicate) ranked
WHERE c.id = ranked.id AND ranked.nth > 1;

CREATE UNIQUE INDEX IF NOT EXISTS campaigns_owner_url_key ON campaigns (user_id, url) WHERE NOT duplicate;
