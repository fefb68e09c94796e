-- A stage's limits across every run (Stage.rate, Stage.limit_by; app/engine/claim_limits.py).

-- The starts of the jobs of stages with a `rate`, kept for as long as they count: claims
-- of such a stage take turns (queries/claim_limit_turn.sql), count the rows of their key
-- still inside the window, and add one row per job they take. The turn's holder prunes
-- its type's rows that left the window, so the table holds about a window's worth of
-- starts per rated stage.
CREATE TABLE stage_starts (
    type        text NOT NULL,
    key         text NOT NULL,  -- the job's limit key ('' for a stage limited as a whole)
    started_at  timestamptz NOT NULL
);
CREATE INDEX stage_starts_window_idx ON stage_starts (type, key, started_at);

-- The key a job is limited by: its lane, or the text at `path` in its payload ('' when the
-- payload has nothing there). Inlined into the statements that call it.
CREATE FUNCTION job_limit_key(lane uuid, payload jsonb, by_lane boolean, path text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN by_lane THEN lane::text ELSE coalesce(payload #>> path, '') END;
