-- Refund job $1's standing charge (its latest generation), exactly once: the unique
-- (job_id, kind, seq) turns a second refund into a no-op, and a job that was never
-- charged has nothing to refund. The credit goes back to the allowance of the day it
-- was taken from. Returns the credits refunded.
WITH charge AS (
    SELECT campaign_id, day, credits, seq FROM credit_ledger
    WHERE job_id = $1 AND kind = 'charge'
    ORDER BY seq DESC
    LIMIT 1
), refund AS (
    INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits, seq)
    SELECT campaign_id, $1, day, 'refund', credits, seq FROM charge
    ON CONFLICT (job_id, kind, seq) DO NOTHING
    RETURNING campaign_id, day, credits
), usage AS (
    UPDATE campaign_usage u
    SET credits = greatest(u.credits - r.credits, 0)
    FROM refund r
    WHERE u.campaign_id = r.campaign_id AND u.day = r.day
)
SELECT coalesce(sum(credits), 0)::int FROM refund
