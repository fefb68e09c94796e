-- A pending job set back to priority 0 in plain SQL (UPDATE jobs SET priority = 0) joins
-- jobs_claim_idx behind its lane's head, if it is older than the head: the probes, which
-- start at the head, would never find it. The lane is told as an enqueue tells it (the job's
-- created_at as the oldest made pending), which moves the head back at once or by the next
-- fold. Ranking a job away from 0 needs nothing: the head stays a lower bound.
CREATE FUNCTION jobs_priority_back_to_zero() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM job_lanes_count(ARRAY[NEW.type], ARRAY[NEW.lane], ARRAY[0], ARRAY[0],
                            ARRAY[NEW.created_at], ARRAY[NEW.run_after],
                            ARRAY[NULL::timestamptz], ARRAY[NULL::timestamptz], true);
    RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION jobs_priority_back_to_zero() FROM PUBLIC;

CREATE TRIGGER jobs_priority_back_to_zero AFTER UPDATE OF priority ON jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND NEW.priority = 0 AND OLD.priority <> 0)
    EXECUTE FUNCTION jobs_priority_back_to_zero();
