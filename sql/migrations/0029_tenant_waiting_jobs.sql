-- How many jobs wait in the caller's own lanes, from the lane counters (a few rows per
-- lane, not the jobs): what POST /jobs weighs against TENANT_WAITING_JOBS_MAX before a
-- tenant's key may enqueue more. The counters are the pipeline's, not the API roles'; this
-- reads only the caller's sums. One tenant had enqueued 2,390 jobs a minute with nothing
-- refused, and a job due in the year 9999 waits for ever.
CREATE FUNCTION app_waiting_jobs() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT coalesce(sum(c.pending), 0)::bigint
    FROM lanes l JOIN job_lanes c ON c.lane = l.id
    WHERE l.owner_id = (SELECT app_user_id())
$$;
REVOKE EXECUTE ON FUNCTION app_waiting_jobs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_waiting_jobs() TO skiplock_api;
