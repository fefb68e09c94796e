-- A cancelled job has a status of its own now (the queue's 0042_cancelled): its refund is
-- owed as a failed one's is, whether it was cancelled before it ran or stopped by its run
-- (the cancelled hook runs once the job is cancelled, in the same transaction). Otherwise
-- as in 0017.
CREATE OR REPLACE FUNCTION billing_refund_job(p_job uuid) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH owed AS (
        SELECT j.id FROM jobs j
        WHERE j.id = p_job AND j.status IN ('pending', 'failed', 'cancelled')
          AND NOT EXISTS (SELECT 1 FROM drafts d WHERE d.job_id = j.id AND d.campaign_id = j.lane)
    ), charge AS (
        SELECT l.campaign_id, l.day, l.credits, l.seq FROM credit_ledger l
        WHERE l.job_id = (SELECT id FROM owed) AND l.kind = 'charge'
        ORDER BY l.seq DESC
        LIMIT 1
    ), refund AS (
        INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits, seq)
        SELECT campaign_id, p_job, day, 'refund', credits, seq FROM charge
        ON CONFLICT (job_id, kind, seq) DO NOTHING
        RETURNING campaign_id, day, credits
    ), usage AS (
        UPDATE campaign_usage u
        SET credits = greatest(u.credits - r.credits, 0)
        FROM refund r
        WHERE u.campaign_id = r.campaign_id AND u.day = r.day
    )
    SELECT coalesce(sum(credits), 0)::int FROM refund
$$;
