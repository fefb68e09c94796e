-- A run beats while it runs (every RUN_HEARTBEAT_SECONDS, with its tally so far), so a
-- killed invocation is seen within a minute, not after twice the platform limit.
-- Rows that exist already count as having beaten when they last changed.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS heartbeat_at timestamptz;
UPDATE runs SET heartbeat_at = coalesce(finished_at, started_at) WHERE heartbeat_at IS NULL;
ALTER TABLE runs ALTER COLUMN heartbeat_at SET DEFAULT now();
ALTER TABLE runs ALTER COLUMN heartbeat_at SET NOT NULL;
