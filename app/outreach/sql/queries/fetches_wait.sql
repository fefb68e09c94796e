-- The waiting fetch jobs (:types: the job types that fetch) of campaign :campaign_id's lane, or with
-- :owner_wide of every campaign of its owner, wait until :until: what each would be told when claimed
-- (the campaign's pages, or the owner's share of the quota, are used up for today).
-- Deferring them one claim at a time handed each claim's `served` back, so a flooded
-- lane stayed "served least" and took every claim of the stage from its plan's other lanes.
UPDATE jobs SET run_after = :until
WHERE status = 'pending' AND type = ANY (:types::text[]) AND run_after < :until
  AND lane IN (SELECT c.id FROM campaigns c
               WHERE c.id = :campaign_id
                  OR (:owner_wide AND c.user_id = (SELECT o.user_id FROM campaigns o WHERE o.id = :campaign_id)))
