-- The HTTP API's own state: the stored answers of side-effecting requests sent with an
-- Idempotency-Key, and the index that serves newest-first keyset pages of jobs.

-- One row per key. The first request inserts it (ON CONFLICT DO NOTHING: the insert
-- that wins is the one that acts), then stores its answer here; later requests with
-- the same key and the same fingerprint get that answer back. status IS NULL means
-- the first request is still in progress.
CREATE TABLE idempotency_keys (
    key           text PRIMARY KEY,
    method        text NOT NULL,
    path          text NOT NULL,
    fingerprint   text NOT NULL,          -- sha256 of method, path, query and the canonical body
    claim         uuid NOT NULL,          -- the request that holds (or held) the key
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    status        integer,                -- the stored answer; NULL while in progress
    headers       jsonb,                  -- the few answer headers worth replaying
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz
);
-- Expiry (maintenance) deletes the oldest first, in bounded batches.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- GET /jobs: newest first over (created_at, id), the keyset the cursor carries. Neither
-- column ever changes, so status updates stay eligible for HOT as before.
CREATE INDEX jobs_listing_idx ON jobs (created_at, id);
