-- The dashboard's reads bounded (issue 41; docs/performance.md#dashboard-reads-at-a-million-jobs).
--
-- The last day's endings on /stats and /trends?window=day are read from the jobs, a
-- range of jobs_finished_idx: what a counter kept at each ending would cost per job is in
-- docs/performance.md.

-- GET /jobs's error search walks only the jobs that have an error, newest first: an
-- admin's list by id, a lane's by lane and id (leaving out what jobs_lane_list_idx does:
-- running jobs, read apart, and the all-zero lane). Partial: a job that never failed
-- writes no entry; each later version of one that did writes one in each.
CREATE INDEX jobs_error_idx ON jobs (id) WHERE last_error IS NOT NULL;
CREATE INDEX jobs_error_lane_idx ON jobs (lane, id)
    WHERE last_error IS NOT NULL AND lane <> '00000000-0000-0000-0000-000000000000' AND status <> 'running';

-- The queue card's open jobs per type, counted up to a cap (dashboard_queue.sql): an
-- admin's ready and waiting off this index, the range of the type's due (or not yet due)
-- jobs, and the oldest due one its first entry. Partial, like jobs_wake_idx: a job writes
-- an entry each time it becomes pending (an enqueue, a retry, a hand-back), none when it
-- is claimed or ends. Without deduplication, as jobs_claim_idx and jobs_wake_idx are
-- (migration 0013): a batch shares its run_after.
CREATE INDEX jobs_due_idx ON jobs (type, run_after) WITH (deduplicate_items = off) WHERE status = 'pending';

-- The job types that have pending jobs, one index probe each (a skip over jobs_due_idx),
-- for the queue card. SECURITY DEFINER: under row-level security a tenant's probe would
-- walk every other tenant's entries of a type to find one of its own; the names are the
-- pipeline's stages, and the card shows a tenant only the types it has jobs of.
CREATE FUNCTION app_pending_types() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH RECURSIVE t(type) AS (
        (SELECT type FROM jobs WHERE status = 'pending' ORDER BY type LIMIT 1)
        UNION ALL
        SELECT (SELECT j.type FROM jobs j WHERE j.status = 'pending' AND j.type > t.type ORDER BY j.type LIMIT 1)
        FROM t WHERE t.type IS NOT NULL
    )
    SELECT type FROM t WHERE type IS NOT NULL
$$;
REVOKE EXECUTE ON FUNCTION app_pending_types() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_pending_types() TO skiplock_api;
