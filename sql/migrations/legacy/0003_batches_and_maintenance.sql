-- Batches (a person's request for a set of work), progress totals, webhooks,
-- recurring maintenance ticks, and the wake-up signal for long-running workers.

CREATE TABLE batches (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN
                     ('pending', 'running', 'completed', 'partially_failed', 'failed', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX batches_campaign_idx ON batches (campaign_id, created_at DESC);
CREATE INDEX batches_open_idx ON batches (created_at) WHERE status IN ('pending', 'running');

ALTER TABLE jobs
    ADD COLUMN batch_id uuid REFERENCES batches (id) ON DELETE SET NULL,
    ADD COLUMN total    integer CHECK (total >= 0),     -- expected units of work, for progress bars
    ADD COLUMN progress integer CHECK (progress >= 0);  -- units done so far
CREATE INDEX jobs_batch_idx ON jobs (batch_id) WHERE batch_id IS NOT NULL;
-- Pruning finished jobs oldest first, in bounded batches.
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE status IN ('done', 'failed');

-- Where an account's notifications go (else the global WEBHOOK_URL, else nowhere).
ALTER TABLE users ADD COLUMN webhook_url text;

-- One row per (recurring task, period): the insert that wins is the one that enqueues,
-- so any number of schedulers at once enqueue each period's task once.
CREATE TABLE recurring_ticks (
    task        text NOT NULL,
    period      timestamptz NOT NULL,
    job_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task, period)
);

-- Wake a waiting worker (python -m app worker) when jobs arrive: one notification
-- per statement, merged per transaction by PostgreSQL.
CREATE FUNCTION jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('skiplock_jobs', '');
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_insert();
