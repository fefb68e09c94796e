-- billing_refund_job owes nothing once the job delivered a draft. It looked for a draft
-- naming the job in any campaign; the API roles may write drafts in their own campaigns,
-- so a tenant's own SQL could name another tenant's job in a draft of its own and cancel
-- that job's refund. The draft that counts is one in the job's own campaign (its lane),
-- where only the job's handler writes it. Otherwise as in 0001_outreach.
CREATE OR REPLACE FUNCTION billing_refund_job(p_job uuid) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH owed AS (
        SELECT j.id FROM jobs j
        WHERE j.id = p_job AND j.status IN ('pending', 'failed')
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
