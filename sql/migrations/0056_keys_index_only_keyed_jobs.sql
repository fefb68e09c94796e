-- The open-key index holds only jobs that have a dedupe key (docs/queue.md#a-shared-database).
--
-- It held every open job, keyed or not, under (lane, dedupe_key): an index a lane's head
-- probe could also read, by its lane alone, sorting the lane's open jobs. Under statistics
-- taken while a snapshot is held, the claim's plan sometimes chose it over jobs_claim_idx,
-- and each probe then read every entry the lane ever had since the snapshot. A probe names
-- no key, so it cannot use this index now; and a job without a key writes no entry in it.
--
-- An enqueue that names a key says so in its conflict target, or the index is not inferred:
--   ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running')
DROP INDEX jobs_open_dedupe_uq;
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (lane, dedupe_key)
    WHERE dedupe_key IS NOT NULL
      AND (status IN ('pending', 'running', 'waiting')
           OR (unique_for IS NOT NULL AND unique_released IS DISTINCT FROM finished_at));

CREATE OR REPLACE FUNCTION batches_enqueue_callback() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO jobs (type, lane, payload, dedupe_key)
    VALUES (NEW.callback_type, NEW.lane,
            coalesce(NEW.callback_payload, '{}') || jsonb_build_object('batch',
                jsonb_build_object('id', NEW.id, 'status', NEW.status)),
            'batch-callback:' || NEW.id)
    ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING;
    RETURN NULL;
END $$;
