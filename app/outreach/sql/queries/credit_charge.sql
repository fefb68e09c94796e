-- Record that job :job_id of campaign :campaign_id is charged one credit today (UTC), once per
-- generation: a retry of a job whose charge still stands gets no row back and pays
-- nothing; a job whose charge was refunded (then retried) pays again.
INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits, seq)
VALUES (:campaign_id, :job_id, (now() AT TIME ZONE 'UTC')::date, 'charge', 1,
        (SELECT count(*) FROM credit_ledger WHERE job_id = :job_id AND kind = 'refund'))
ON CONFLICT (job_id, kind, seq) DO NOTHING
RETURNING day
