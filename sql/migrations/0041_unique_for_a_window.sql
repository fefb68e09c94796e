-- A dedupe key can stay taken after its job has ended: `unique_for`, how long past the
-- job's finished_at (any ending: done, failed, cancelled) an enqueue of the same key in the
-- same lane is still a duplicate ("at most one digest per account per hour"). NULL: the
-- key is free again when the job ends, as before.
--
-- The insert stays the check (invariant 1): the unique index on open keys also holds a
-- finished job whose key is still taken. Its predicate is implied by the one every
-- enqueue names (ON CONFLICT (lane, dedupe_key) WHERE status IN ('pending', 'running')),
-- so those statements, plain SQL from other clients included, keep working and now also
-- meet the windows. Jobs without a key are indexed exactly as before.
--
-- An index cannot say "until finished_at + unique_for is past", so a finished job keeps
-- its key until the next job that wants the key finds the window over and lets it go
-- (the triggers below): unique_released is the finished_at whose window was let go, so a
-- retried job that ends again takes its key again.

ALTER TABLE jobs ADD COLUMN unique_for interval CHECK (unique_for >= interval '0'),
                 ADD COLUMN unique_released timestamptz;

DROP INDEX jobs_open_dedupe_uq;
CREATE UNIQUE INDEX jobs_open_dedupe_uq ON jobs (lane, dedupe_key)
    WHERE status IN ('pending', 'running')
       OR (dedupe_key IS NOT NULL AND unique_for IS NOT NULL AND unique_released IS DISTINCT FROM finished_at);

-- Before a row takes a key (an insert; an ended job made pending again, as a retry does):
-- a job that ended with the key and whose window is over lets it go. The update locks
-- that job's row, so takers of one key at once queue behind the first, then find the key
-- let go and the first's new job holding it. SECURITY DEFINER: a tenant's enqueue lets go
-- of its own lane's key (the same lane as the row), whatever the role may update.
CREATE FUNCTION jobs_let_go_of_key() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    UPDATE jobs SET unique_released = finished_at
    WHERE lane = NEW.lane AND dedupe_key = NEW.dedupe_key AND id <> NEW.id
      AND status NOT IN ('pending', 'running')
      AND unique_for IS NOT NULL AND unique_released IS DISTINCT FROM finished_at
      AND finished_at + unique_for <= now();
    RETURN NEW;
END $$;

-- Row by row with a WHEN, which is evaluated without calling anything: a job without a
-- key never calls the function, nor does any claim, ending or deferral (none makes an
-- ended job pending).
CREATE TRIGGER jobs_let_go_of_key_insert BEFORE INSERT ON jobs
    FOR EACH ROW WHEN (NEW.dedupe_key IS NOT NULL)
    EXECUTE FUNCTION jobs_let_go_of_key();
CREATE TRIGGER jobs_let_go_of_key_reopen BEFORE UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status NOT IN ('pending', 'running')
                       AND NEW.dedupe_key IS NOT NULL)
    EXECUTE FUNCTION jobs_let_go_of_key();
