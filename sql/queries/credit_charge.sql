-- Record that job $2 of campaign $1 is charged one credit today (UTC). At most one
-- charge per job: a retry of an already charged job gets no row back and pays nothing.
INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits)
VALUES ($1, $2, (now() AT TIME ZONE 'UTC')::date, 'charge', 1)
ON CONFLICT (job_id, kind) DO NOTHING
RETURNING day
