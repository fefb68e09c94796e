-- The queue card's ready jobs, exact for an admin however long the backlog: the type's
-- pending jobs from the lane counters (job_lane_counts: each lane's row plus its journal's
-- lines) less those not yet due, which the card counts off jobs_due_idx up to its cap
-- anyway (app/engine/queue_stats.py). SECURITY DEFINER: the API roles may not read
-- job_lanes; every lane's, so for admins only.
CREATE FUNCTION app_pending_by_type() RETURNS TABLE (type text, pending bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT c.type, sum(c.pending)::bigint FROM job_lane_counts c
    WHERE c.pending > 0
    GROUP BY c.type
$$;
REVOKE EXECUTE ON FUNCTION app_pending_by_type() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_pending_by_type() TO skiplock_admin;
