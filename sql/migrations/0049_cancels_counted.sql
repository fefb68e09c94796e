-- /metrics counts cancels: job_type_totals gets `cancelled`, the jobs of each type that
-- ended cancelled (migration 0042), whoever ended them: a person's cancel of a pending or
-- waiting job, a run stopping a running one, the stuck sweep, a chain of waiting jobs
-- cancelled after a parent that did not succeed, or a job enqueued after one.
--
-- Most cancels happen outside any run, so this count is not taken from the runs'
-- summaries (as done, failed, retried and deferred are: 0022, 0036) but from the jobs
-- themselves, as each ends cancelled: a recount of the other columns over runs must leave
-- it as it is (no DELETE FROM job_type_totals, as 0036 did). Like the other
-- columns it is a counter of what happened: a cancelled job retried, or pruned, is still
-- counted.

ALTER TABLE job_type_totals ADD COLUMN cancelled bigint NOT NULL DEFAULT 0;

-- One upsert per job that ends cancelled. SECURITY DEFINER: a tenant's cancel, and a
-- run's, count without their roles writing the totals.
CREATE FUNCTION jobs_count_cancelled() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO job_type_totals AS t (type, cancelled) VALUES (NEW.type, 1)
    ON CONFLICT (type) DO UPDATE SET cancelled = t.cancelled + 1;
    RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION jobs_count_cancelled() FROM PUBLIC;

-- The WHENs are evaluated in C: every other update or insert of a job calls no function.
CREATE TRIGGER jobs_count_cancelled AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status IS DISTINCT FROM 'cancelled')
    EXECUTE FUNCTION jobs_count_cancelled();
-- a job enqueued after one that already failed or was cancelled is written cancelled (0046)
CREATE TRIGGER jobs_count_cancelled_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.status = 'cancelled')
    EXECUTE FUNCTION jobs_count_cancelled();

-- The cancels already made, still in jobs. The triggers above took the table's lock, which
-- waited for any open writer: a cancel commits either before this count or after it, with
-- its trigger, never in neither and never in both.
INSERT INTO job_type_totals AS t (type, cancelled)
SELECT type, count(*) FROM jobs WHERE status = 'cancelled' GROUP BY type ORDER BY type
ON CONFLICT (type) DO UPDATE SET cancelled = t.cancelled + excluded.cancelled;
