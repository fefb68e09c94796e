-- GET /campaigns and `skiplock campaign ls` page newest first over (created_at, id): an
-- index in that order lets a page read its rows from the cursor on, where without one
-- every page sorted every campaign the caller may see.
CREATE INDEX campaigns_listing_idx ON campaigns (created_at, id);
