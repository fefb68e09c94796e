-- A campaign's contacts page in the order they were found (or newest first) over
-- (created_at, id): an index in that order within the campaign lets a page read its rows
-- from the cursor on, where the unique (campaign_id, value) index made every page sort all
-- of the campaign's contacts.
CREATE INDEX contacts_listing_idx ON contacts (campaign_id, created_at, id);
