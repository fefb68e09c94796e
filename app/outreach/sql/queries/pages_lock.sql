-- Serialise the recording of campaign :campaign_id's pages (released at transaction end). Crawls
-- of one campaign run side by side and discover overlapping links; without this, two of
-- them inserting the same new pages in different orders could deadlock.
SELECT pg_advisory_xact_lock(hashtext('skiplock.pages'), hashtext(:campaign_id::uuid::text))
