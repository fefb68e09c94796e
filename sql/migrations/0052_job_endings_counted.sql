-- The dashboard's endings and error search, bounded (issue 41; docs/performance.md#dashboard-reads-at-a-million-jobs).
--
-- job_endings: the jobs that ended done, failed or cancelled, per half hour (date_bin of
-- finished_at from the epoch, as /trends buckets a day), lane, type and wait class, so
-- /stats's queue card and /trends?window=day sum a few rows per half hour instead of
-- reading every job that ended. job_endings_by_type: the same without the lane, for the
-- admin's view (every lane). A job that leaves an ended status (a retry) is taken back out
-- of the half hour it had ended in, so the counts equal counting the jobs; deleting jobs
-- (pruning) takes nothing back: the rows count what ended, as job_type_totals do.
--
-- Each row also carries the backend that wrote it (`writer`, pg_backend_pid()): two
-- transactions that are open at once never share a backend, so no ending ever waits for
-- another's counter row (overlapping runs end jobs of the same lanes and types). A
-- reader sums over writers; per half hour there are as many rows as backends that ended
-- jobs, not as jobs.
--
-- wait_class: the job's last wait from due (run_after) to claimed (locked_at), two
-- classes per doubling from a millisecond (job_wait_class), -1 when never claimed; the
-- day's wait percentiles are read from them (job_wait_class_seconds: the class's
-- geometric middle, within 19% of any wait in it).

CREATE FUNCTION job_wait_class(locked_at timestamptz, run_after timestamptz) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN locked_at IS NULL THEN -1
                WHEN extract(epoch FROM locked_at - run_after) < 0.001 THEN 0
                ELSE least(1 + floor(2 * log(2, (extract(epoch FROM locked_at - run_after) * 1000)::numeric)), 80)
           END::smallint
$$;

CREATE FUNCTION job_wait_class_seconds(wait_class smallint) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN wait_class < 0 THEN NULL WHEN wait_class = 0 THEN 0
                ELSE 0.001 * power(2, (wait_class - 0.5) / 2.0) END
$$;

CREATE TABLE job_endings (
    lane        uuid NOT NULL,
    bucket      timestamptz NOT NULL,
    type        text NOT NULL,
    wait_class  smallint NOT NULL,
    writer      integer NOT NULL,
    done        integer NOT NULL DEFAULT 0,
    failed      integer NOT NULL DEFAULT 0,
    cancelled   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (lane, bucket, type, wait_class, writer)
) WITH (fillfactor = 70);

CREATE TABLE job_endings_by_type (
    bucket      timestamptz NOT NULL,
    type        text NOT NULL,
    wait_class  smallint NOT NULL,
    writer      integer NOT NULL,
    done        integer NOT NULL DEFAULT 0,
    failed      integer NOT NULL DEFAULT 0,
    cancelled   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, type, wait_class, writer)
) WITH (fillfactor = 70);

-- Add the deltas: one row per (lane, half hour, type, wait class, status) with n jobs
-- (negative: taken back), in this backend's rows: upserts in key order, the lane rows
-- first.
CREATE FUNCTION job_endings_add(lanes uuid[], buckets timestamptz[], types text[], classes smallint[],
                                statuses text[], ns integer[]) RETURNS void
LANGUAGE sql SET search_path = public, pg_temp AS $$
    INSERT INTO job_endings AS e (lane, bucket, type, wait_class, writer, done, failed, cancelled)
    SELECT lane, bucket, type, wait_class, pg_backend_pid(),
           coalesce(sum(n) FILTER (WHERE status = 'done'), 0), coalesce(sum(n) FILTER (WHERE status = 'failed'), 0),
           coalesce(sum(n) FILTER (WHERE status = 'cancelled'), 0)
    FROM unnest(lanes, buckets, types, classes, statuses, ns) AS d(lane, bucket, type, wait_class, status, n)
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 2, 3, 4
    ON CONFLICT (lane, bucket, type, wait_class, writer) DO UPDATE
    SET done = e.done + excluded.done, failed = e.failed + excluded.failed, cancelled = e.cancelled + excluded.cancelled;

    INSERT INTO job_endings_by_type AS e (bucket, type, wait_class, writer, done, failed, cancelled)
    SELECT bucket, type, wait_class, pg_backend_pid(),
           coalesce(sum(n) FILTER (WHERE status = 'done'), 0), coalesce(sum(n) FILTER (WHERE status = 'failed'), 0),
           coalesce(sum(n) FILTER (WHERE status = 'cancelled'), 0)
    FROM unnest(buckets, types, classes, statuses, ns) AS d(bucket, type, wait_class, status, n)
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (bucket, type, wait_class, writer) DO UPDATE
    SET done = e.done + excluded.done, failed = e.failed + excluded.failed, cancelled = e.cancelled + excluded.cancelled;
$$;

-- Statement-level, with the transition tables the lane counters' triggers already keep
-- (PostgreSQL captures them once per statement for all of a table's triggers): a claim,
-- a heartbeat, any update that neither ends a job nor reopens an ended one finds no row
-- here and writes nothing; a batch of endings writes a row per (lane, half hour, type,
-- wait class). An update of an ended job that keeps it ended, in the same half hour and
-- class, nets out to nothing.
CREATE FUNCTION jobs_count_endings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_lane uuid[]; a_bucket timestamptz[]; a_type text[]; a_class smallint[]; a_status text[]; a_n integer[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(lane), array_agg(bucket), array_agg(type), array_agg(wait_class), array_agg(status),
               array_agg(n)
        INTO a_lane, a_bucket, a_type, a_class, a_status, a_n
        FROM (SELECT lane, date_bin('30 minutes', finished_at, 'epoch') AS bucket, type,
                     job_wait_class(locked_at, run_after) AS wait_class, status, count(*)::int AS n
              FROM new_jobs
              WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NOT NULL
              GROUP BY 1, 2, 3, 4, 5) d;
    ELSE
        SELECT array_agg(lane), array_agg(bucket), array_agg(type), array_agg(wait_class), array_agg(status),
               array_agg(n)
        INTO a_lane, a_bucket, a_type, a_class, a_status, a_n
        FROM (SELECT lane, bucket, type, wait_class, status, sum(n)::int AS n
              FROM (SELECT lane, date_bin('30 minutes', finished_at, 'epoch') AS bucket, type,
                           job_wait_class(locked_at, run_after) AS wait_class, status, 1 AS n
                    FROM new_jobs
                    WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NOT NULL
                    UNION ALL
                    SELECT lane, date_bin('30 minutes', finished_at, 'epoch'), type,
                           job_wait_class(locked_at, run_after), status, -1
                    FROM old_jobs
                    WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NOT NULL) c
              GROUP BY 1, 2, 3, 4, 5
              HAVING sum(n) <> 0) d;
    END IF;
    IF a_lane IS NOT NULL THEN
        PERFORM job_endings_add(a_lane, a_bucket, a_type, a_class, a_status, a_n);
    END IF;
    RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION jobs_count_endings() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION job_endings_add(uuid[], timestamptz[], text[], smallint[], text[], integer[]) FROM PUBLIC;

-- No job ends between the backfill's snapshot and the triggers (released at commit).
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER jobs_count_endings_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_endings();
CREATE TRIGGER jobs_count_endings_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_endings();

-- The endings already in jobs (writer 0: no backend).
INSERT INTO job_endings (lane, bucket, type, wait_class, writer, done, failed, cancelled)
SELECT lane, date_bin('30 minutes', finished_at, 'epoch'), type, job_wait_class(locked_at, run_after), 0,
       count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'cancelled')
FROM jobs
WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY 1, 2, 3, 4;
INSERT INTO job_endings_by_type (bucket, type, wait_class, writer, done, failed, cancelled)
SELECT bucket, type, wait_class, 0, sum(done), sum(failed), sum(cancelled)
FROM job_endings
GROUP BY 1, 2, 3;

-- Row-level security: a tenant reads its own lanes' endings; the totals over every lane
-- are the operator's.
ALTER TABLE job_endings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON job_endings USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
ALTER TABLE job_endings_by_type ENABLE ROW LEVEL SECURITY;
CREATE POLICY operator ON job_endings_by_type USING ((SELECT app_is_admin()));
GRANT SELECT ON job_endings, job_endings_by_type TO skiplock_api;

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
