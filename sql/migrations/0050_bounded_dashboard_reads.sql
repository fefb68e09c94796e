-- The dashboard's reads at a million jobs (issue 41, docs/performance.md#dashboard-reads-at-a-million-jobs).

-- Runs and the audit log are the operator's: the same rows as before (an admin every row,
-- anyone else none), but app_is_admin() in a scalar subquery is evaluated once per
-- statement (an InitPlan) instead of once per row, so a tenant's read of runs stops at
-- the one-time filter instead of reading every run to keep none.
DROP POLICY operator ON runs;
CREATE POLICY operator ON runs USING ((SELECT app_is_admin()));
DROP POLICY operator ON audit_log;
CREATE POLICY operator ON audit_log USING ((SELECT app_is_admin()));

-- The dashboard's trouble list (dashboard_trouble.sql) without reading every open or
-- finished job to find ten. Partial indexes that hold only the rare rows: a job gets an
-- entry in each pair when a version of its row is failed, or pending after a failed
-- attempt (waiting out its backoff); a job that succeeds on its first attempt, none. The
-- columns are already in other indexes' keys or predicates, so no update that was HOT
-- stops being one.
-- The newest failed jobs: an admin's across lanes, a tenant's lane by lane (ties by id,
-- so both read the same ten).
CREATE INDEX jobs_failed_idx ON jobs (finished_at, id) WHERE status = 'failed';
CREATE INDEX jobs_failed_lane_idx ON jobs (lane, finished_at DESC NULLS LAST, id DESC) WHERE status = 'failed';
-- Jobs retrying, due first: an admin's across lanes, a tenant's lane by lane.
CREATE INDEX jobs_retrying_idx ON jobs (run_after, id) WHERE status = 'pending' AND last_error IS NOT NULL;
CREATE INDEX jobs_retrying_lane_idx ON jobs (lane, run_after, id) WHERE status = 'pending' AND last_error IS NOT NULL;

-- Pending jobs per lane from the lane counters (job_lane_counts: exact, the journal
-- included), for the busiest lanes (dashboard_lanes_all.sql, dashboard_lanes.sql): a row
-- per lane and type instead of a count of every open job. The counters are the
-- pipeline's, so the API roles read them through these functions: every lane's only for
-- an admin (by grant: inside a SECURITY DEFINER function app_is_admin() would ask about
-- the owner), the caller's own lanes for anyone, as app_waiting_jobs() (0029).
CREATE FUNCTION app_pending_by_lane() RETURNS TABLE (lane uuid, pending bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT c.lane, sum(c.pending)::bigint FROM job_lane_counts c WHERE c.pending > 0 GROUP BY c.lane
$$;
REVOKE EXECUTE ON FUNCTION app_pending_by_lane() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_pending_by_lane() TO skiplock_admin;

CREATE FUNCTION app_own_pending_by_lane() RETURNS TABLE (lane uuid, pending bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT c.lane, sum(c.pending)::bigint
    FROM lanes l JOIN job_lane_counts c ON c.lane = l.id
    WHERE l.owner_id = (SELECT app_user_id()) AND c.pending > 0
    GROUP BY c.lane
$$;
REVOKE EXECUTE ON FUNCTION app_own_pending_by_lane() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_own_pending_by_lane() TO skiplock_api;
