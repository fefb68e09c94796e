-- Running totals of finished runs, so GET /metrics reads a few dozen rows instead of
-- every run (runs are never pruned: a scan would grow forever). Triggers on runs keep
-- them as each run finishes: one upsert per invocation, none per heartbeat.
--
--   run_totals: per trigger, stop reason and duration bucket, the finished runs and
--     their seconds. bounds_at_or_above is how many of the histogram's bounds
--     (run_duration_bounds()) are >= the run's duration: the run counts in the `le`
--     buckets of that many of the largest bounds. Triggers x stop reasons x 10 rows.
--   job_type_totals: per job type, the done, failed and deferred of the finished runs'
--     summaries (summary -> 'stages' -> type -> {done, failed, deferred}).
--
-- A finished run changed afterwards (a run closed as abandoned that then finishes after
-- all) moves its counts from the old row image to the new one, so the totals always
-- equal a recount over runs. Deleting runs (by hand: nothing prunes them) leaves the
-- totals as they were: they are counters of what ran.

-- No run finishes between the backfill's snapshot and the triggers (released at commit).
LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE;

-- The run-duration histogram's upper bounds, in seconds (app.engine.queue_stats labels
-- the buckets with them). Changing them takes a migration that recounts run_totals.
CREATE FUNCTION run_duration_bounds() RETURNS float8[]
LANGUAGE sql IMMUTABLE AS $$ SELECT '{1,5,15,30,60,120,180,240,300}'::float8[] $$;

CREATE FUNCTION run_duration_bucket(seconds float8) RETURNS smallint
LANGUAGE sql IMMUTABLE AS $$
    SELECT count(*)::smallint FROM unnest(run_duration_bounds()) AS b WHERE b >= seconds
$$;

-- One outcome's count in a stage's summary; 0 when missing or not a number, so a run
-- with an odd summary still finishes.
CREATE FUNCTION summary_count(stage jsonb, outcome text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(stage -> outcome) = 'number'
                THEN (stage ->> outcome)::numeric::bigint ELSE 0 END
$$;

CREATE TABLE run_totals (
    trigger             text NOT NULL,
    stop_reason         text NOT NULL,
    bounds_at_or_above  smallint NOT NULL,
    runs                bigint NOT NULL DEFAULT 0,
    seconds             numeric NOT NULL DEFAULT 0,  -- exact: the sum a recount gives
    PRIMARY KEY (trigger, stop_reason, bounds_at_or_above)
);

CREATE TABLE job_type_totals (
    type      text PRIMARY KEY,
    done      bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    deferred  bigint NOT NULL DEFAULT 0
);

-- Add (sign 1) or take back (sign -1) the counts of the finished runs among `rs`,
-- summed first, so a statement that writes many runs touches each totals row once (an
-- upsert per run would revisit the same few rows, each visit slower in one transaction).
-- Rows are locked in key order, so two finishing runs never wait on each other in a cycle.
CREATE FUNCTION run_totals_add(rs runs[], sign integer) RETURNS void
LANGUAGE sql SET search_path = public, pg_temp AS $$
    INSERT INTO run_totals AS t (trigger, stop_reason, bounds_at_or_above, runs, seconds)
    SELECT r.trigger, coalesce(r.stop_reason, 'error'),
           run_duration_bucket(extract(epoch FROM r.finished_at - r.started_at)::float8),
           sign * count(*), sign * sum(extract(epoch FROM r.finished_at - r.started_at))
    FROM unnest(rs) AS r
    WHERE r.finished_at IS NOT NULL
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (trigger, stop_reason, bounds_at_or_above)
    DO UPDATE SET runs = t.runs + excluded.runs, seconds = t.seconds + excluded.seconds;

    INSERT INTO job_type_totals AS t (type, done, failed, deferred)
    SELECT s.key, sign * sum(summary_count(s.value, 'done')), sign * sum(summary_count(s.value, 'failed')),
           sign * sum(summary_count(s.value, 'deferred'))
    FROM unnest(rs) AS r CROSS JOIN LATERAL jsonb_each(r.summary -> 'stages') AS s
    WHERE r.finished_at IS NOT NULL AND jsonb_typeof(r.summary -> 'stages') = 'object'
    GROUP BY s.key
    ORDER BY s.key
    ON CONFLICT (type)
    DO UPDATE SET done = t.done + excluded.done, failed = t.failed + excluded.failed,
                  deferred = t.deferred + excluded.deferred;
$$;

-- A run finishes (or a finished run is changed: its old counts out, its new ones in).
CREATE FUNCTION runs_count_finished() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    IF OLD.finished_at IS NOT NULL THEN
        PERFORM run_totals_add(ARRAY[OLD], -1);
    END IF;
    PERFORM run_totals_add(ARRAY[NEW], 1);
    RETURN NULL;
END $$;

-- Runs written finished (an import, a benchmark's history): counted per statement.
CREATE FUNCTION runs_count_inserted() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted WHERE finished_at IS NOT NULL) THEN
        PERFORM run_totals_add((SELECT array_agg(i::runs) FROM inserted AS i), 1);
    END IF;
    RETURN NULL;
END $$;

-- The UPDATE trigger's WHEN is evaluated in C: a heartbeat (an open run's update) calls
-- no function. The INSERT trigger runs once per statement: a run's start pays one look
-- at its own new row.
CREATE TRIGGER count_finished AFTER UPDATE OF trigger, stop_reason, summary, started_at, finished_at ON runs
    FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL OR NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION runs_count_finished();
CREATE TRIGGER count_inserted AFTER INSERT ON runs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runs_count_inserted();

-- The runs finished so far, counted once here, a day of runs at a time (one array of
-- every run could be too big to hold).
SELECT run_totals_add(array_agg(r), 1)
FROM runs AS r
WHERE r.finished_at IS NOT NULL
GROUP BY r.started_at::date;
