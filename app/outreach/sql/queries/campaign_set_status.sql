-- Pause or resume campaign :campaign_id (:status: 'active' or 'paused'); its lane follows through the
-- lane-ranking trigger. The row (none when there is no such campaign, or row-level
-- security hides it), and whether the status changed now.
WITH old AS (
    SELECT id, status FROM campaigns WHERE id = :campaign_id FOR NO KEY UPDATE
), new AS (
    UPDATE campaigns c SET status = :status
    FROM old
    WHERE c.id = old.id AND old.status <> :status
    RETURNING c.id
)
SELECT old.id, (SELECT count(*) FROM new) > 0 AS changed FROM old
