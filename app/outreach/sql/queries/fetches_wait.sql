-- The waiting fetch jobs ($3: the job types that fetch) of campaign $1's lane, or with
-- $4 of every campaign of its owner, wait until $2: what each would be told when claimed
-- (the campaign's pages, or the owner's share of the quota, are used up for today).
-- Deferring them one claim at a time handed each claim's `served` back, so a flooded
-- lane stayed "served least" and took every claim of the stage from its plan's other lanes.
UPDATE jobs SET run_after = $2
WHERE status = 'pending' AND type = ANY ($3::text[]) AND run_after < $2
  AND lane IN (SELECT c.id FROM campaigns c
               WHERE c.id = $1
                  OR ($4 AND c.user_id = (SELECT o.user_id FROM campaigns o WHERE o.id = $1)))
