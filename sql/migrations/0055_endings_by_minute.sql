-- The dashboard's last two unbounded reads bounded (issue 41; docs/dashboard-reads.md),
-- with no new work on the hot path: no trigger on jobs, no write per job.
--
-- 1. The last day's endings (/stats's queue card, /trends?window=day) are read from
--    per-minute rollups of the minutes that have closed, and live from jobs_finished_idx
--    for the few minutes since. The readers roll closed minutes up as they come
--    (app_roll_up_endings), so a day is about 1,440 rows per type and status for an
--    admin, at most a row per lane, type, status and minute for a tenant (never more
--    rows than endings), instead of a heap row per ending.
-- 2. GET /jobs with `until` (and `since`) walks the key between the ids they bound (ids
--    are made from the clock when the row is written, created_at when its transaction
--    began), and the few jobs whose created_at is a minute or more from their id's time
--    off a partial index.

-- A wait's class in a fixed log scale: 0 under a millisecond (a wait of 0 included), then
-- four classes per doubling from 1 ms (each class spans a factor 2^(1/4)). A percentile
-- taken over the classes of many minutes, each wait standing for its class's middle
-- (wait_class_seconds), is within 2^(1/8) (9%) of the exact one, or under a millisecond off
-- below 1 ms.
CREATE FUNCTION wait_class(seconds float8) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN seconds < 0.001 THEN 0
                ELSE least(1 + floor(4 * ln(seconds / 0.001) / ln(2)), 32000) END::smallint
$$;

-- The value a class stands for: the geometric middle of its span (0 for class 0).
CREATE FUNCTION wait_class_seconds(class smallint) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN class = 0 THEN 0 ELSE 0.001 * power(2::float8, (class - 0.5::float8) / 4) END
$$;

-- A job's wait class, its last attempt's from due (run_after) to claimed (locked_at);
-- NULL for a job never claimed, which has no wait.
CREATE FUNCTION job_wait_class(locked_at timestamptz, run_after timestamptz) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN locked_at IS NOT NULL
                THEN wait_class(greatest(extract(epoch FROM locked_at - run_after), 0)::float8) END
$$;

-- Jobs that ended in a minute, per lane, type and ending status; lane NULL: every lane's
-- (what an admin reads). For the queue card's last day, exact to the minute.
CREATE TABLE job_endings_by_minute (
    minute      timestamptz NOT NULL,
    lane        uuid,
    type        text NOT NULL,
    status      text NOT NULL,
    jobs        integer NOT NULL
);
-- lane first: a tenant reads its lanes one by one, an admin the NULL lane's minutes, each a
-- run of entries that holds the figures (an index-only scan, not a heap page per row)
CREATE UNIQUE INDEX job_endings_by_minute_uq ON job_endings_by_minute (lane, minute, type, status)
    INCLUDE (jobs) NULLS NOT DISTINCT;

-- The same per half hour (from the epoch, as a day of trends buckets them), with the
-- claimed jobs' last waits (due to claimed) in classes: waits the classes, wait_counts how
-- many in each. A half hour's row holds its minutes that are rolled up, so far.
CREATE TABLE job_endings_by_half_hour (
    half_hour   timestamptz NOT NULL,
    lane        uuid,
    type        text NOT NULL,
    status      text NOT NULL,
    jobs        integer NOT NULL,
    waits       smallint[] NOT NULL,
    wait_counts bigint[] NOT NULL
);
CREATE UNIQUE INDEX job_endings_by_half_hour_uq ON job_endings_by_half_hour (lane, half_hour, type, status)
    INCLUDE (jobs, waits, wait_counts) NULLS NOT DISTINCT;

-- Two lists of wait classes and counts merged: each class once, its counts summed.
CREATE FUNCTION wait_classes_merged(a_waits smallint[], a_counts bigint[], b_waits smallint[], b_counts bigint[],
                                    OUT waits smallint[], OUT wait_counts bigint[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(class ORDER BY class), '{}'), coalesce(array_agg(n ORDER BY class), '{}')
    FROM (SELECT class, sum(n)::bigint AS n
          FROM (SELECT * FROM unnest(a_waits, a_counts) UNION ALL SELECT * FROM unnest(b_waits, b_counts)) u(class, n)
          GROUP BY class) m
$$;

-- The minutes rolled up: every minute in [rolled_from, rolled_to) is in both tables (no
-- row when no job ended in it), no other minute is (but for minutes before rolled_from
-- in the half hour that holds it, which no window reads). One row; none reads as none
-- rolled up.
CREATE TABLE job_endings_rolled (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    rolled_from timestamptz NOT NULL,
    rolled_to   timestamptz NOT NULL
);
INSERT INTO job_endings_rolled VALUES (true, '-infinity', '-infinity');

-- A tenant sees its own lanes' rows, an admin every row.
ALTER TABLE job_endings_by_minute ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON job_endings_by_minute USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
ALTER TABLE job_endings_by_half_hour ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON job_endings_by_half_hour USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
GRANT SELECT ON job_endings_by_minute, job_endings_by_half_hour, job_endings_rolled TO skiplock_api;

-- Roll up the minutes that have closed and are not rolled up yet, within the last 25
-- hours (what the longest window reads), and drop the rows older than that. A minute has
-- closed a minute after it ended and once no transaction that writes began before its
-- end (an ending's finished_at is its transaction's start; as far as pg_stat_activity
-- shows the owner). One caller at a time: a caller that finds another rolling up goes on
-- without (its readers read the rest live), so concurrent readers neither wait nor count
-- a minute twice. SECURITY DEFINER: a tenant's dashboard rolls up every lane's endings,
-- and reads back only its own (row-level security above).
CREATE FUNCTION app_roll_up_endings() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    closed timestamptz;
    keep_from timestamptz := date_trunc('minute', now() - interval '25 hours');
    m job_endings_rolled;
BEGIN
    SELECT date_trunc('minute', least(now() - interval '1 minute',
                                      (SELECT min(xact_start) FROM pg_stat_activity
                                       WHERE datname = current_database() AND backend_xid IS NOT NULL
                                         AND pid <> pg_backend_pid())))
      INTO closed;
    SELECT * INTO m FROM job_endings_rolled;
    IF FOUND AND m.rolled_to >= closed THEN
        RETURN;
    END IF;
    IF NOT FOUND THEN  -- emptied by hand (TRUNCATE): nothing is rolled up
        INSERT INTO job_endings_rolled VALUES (true, '-infinity', '-infinity') ON CONFLICT DO NOTHING;
    END IF;
    SELECT * INTO m FROM job_endings_rolled FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR m.rolled_to >= closed THEN
        RETURN;
    END IF;
    IF m.rolled_to < keep_from THEN  -- a gap (nobody read for a day, or the first call): start afresh
        DELETE FROM job_endings_by_minute;
        DELETE FROM job_endings_by_half_hour;
        m.rolled_from := keep_from;
        m.rolled_to := keep_from;
    ELSIF m.rolled_from < keep_from THEN
        DELETE FROM job_endings_by_minute WHERE minute < keep_from;
        DELETE FROM job_endings_by_half_hour
        WHERE half_hour < date_bin(interval '30 minutes', keep_from, 'epoch'::timestamptz);
        m.rolled_from := keep_from;
    END IF;
    WITH ended AS MATERIALIZED (  -- the minutes' endings, read once
        SELECT date_trunc('minute', finished_at) AS minute, lane, type, status,
               job_wait_class(locked_at, run_after) AS class, count(*) AS n
        FROM jobs
        WHERE status IN ('done', 'failed', 'cancelled') AND finished_at >= m.rolled_to AND finished_at < closed
        GROUP BY 1, 2, 3, 4, 5
    ), minutes AS (
        INSERT INTO job_endings_by_minute (minute, lane, type, status, jobs)
        SELECT minute, lane, type, status, sum(n)::int FROM ended
        GROUP BY GROUPING SETS ((minute, lane, type, status), (minute, type, status))
    )
    INSERT INTO job_endings_by_half_hour AS h (half_hour, lane, type, status, jobs, waits, wait_counts)
    SELECT half_hour, lane, type, status, sum(n)::int,
           coalesce(array_agg(class ORDER BY class) FILTER (WHERE class IS NOT NULL), '{}'),
           coalesce(array_agg(n ORDER BY class) FILTER (WHERE class IS NOT NULL), '{}')
    FROM (
        SELECT half_hour, lane, type, status, class, sum(n) AS n
        FROM (SELECT date_bin(interval '30 minutes', minute, 'epoch'::timestamptz) AS half_hour, * FROM ended) e
        GROUP BY GROUPING SETS ((half_hour, lane, type, status, class), (half_hour, type, status, class))
    ) g
    GROUP BY half_hour, lane, type, status
    ON CONFLICT (lane, half_hour, type, status) DO UPDATE
    SET jobs = h.jobs + excluded.jobs,
        (waits, wait_counts) = (SELECT * FROM wait_classes_merged(h.waits, h.wait_counts, excluded.waits,
                                                                  excluded.wait_counts));
    UPDATE job_endings_rolled SET rolled_from = m.rolled_from, rolled_to = closed;
END
$$;
REVOKE EXECUTE ON FUNCTION app_roll_up_endings() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app_roll_up_endings() TO skiplock_api;

-- Bounds on the ids of the jobs created in [since, until) whose id was made within a
-- minute of their created_at: every such id (version 7) lies in [job_id_floor(since),
-- job_id_bound(until)), which GET /jobs walks. IMMUTABLE (an epoch and a minute do not
-- depend on the time zone), so a plan made for the values holds the bounds as constants
-- and sees how few jobs lie between them.
CREATE FUNCTION job_id_bound(until timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(floor(extract(epoch FROM until + interval '1 minute') * 1000)::bigint + 1) FROM 3)
                  || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;
CREATE FUNCTION job_id_floor(since timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(floor(extract(epoch FROM since - interval '1 minute') * 1000)::bigint) FROM 3)
                  || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;

-- The jobs whose id was made more than a minute from their created_at (a transaction that
-- ran long, created_at set by hand, an id not of version 7, whose first 48 bits read as a
-- time are anything): the ones those bounds do not hold. The id's time is its first 48
-- bits, Unix milliseconds. Partial: a job created the usual way writes no entry; every row
-- version that is not a HOT update computes the predicate, as every partial index's (about
-- 1.1 µs; written out, not a function: the migrations pin every function's search_path,
-- and a function with a setting is not inlined, 7 µs).
CREATE INDEX jobs_created_apart_idx ON jobs (id)
    WHERE (to_timestamp(('x' || left(encode(uuid_send(id), 'hex'), 12))::bit(48)::bigint / 1000.0) - created_at
           BETWEEN interval '-1 minute' AND interval '1 minute') IS NOT TRUE;
