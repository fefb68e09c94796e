-- One meaning of "failed" everywhere (docs/queue.md#words): a job that ended failed, with
-- no attempt left or failed for good. An attempt that failed and will be tried again is
-- "retried". A run counts both: jobs_failed and the new jobs_retried, and so does each
-- stage in its summary ({done, failed, retried, deferred}). The handlers' own counters
-- move from the summary's top level to summary -> 'counts', so the summary's own keys
-- are the API's camelCase words and a counter's name is the handler's.
--
-- Runs finished before this kept failed attempts in jobs_failed and the jobs given up in
-- summary -> 'gaveUp' (the stuck sweep's among them, which jobs_failed did not count):
-- they are split the same way here. A stage's split is not known for them: its jobs
-- given up are taken from the run's, stages in name order.

LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE runs ADD COLUMN jobs_retried integer NOT NULL DEFAULT 0;
ALTER TABLE job_type_totals ADD COLUMN retried bigint NOT NULL DEFAULT 0;

-- The totals are recounted below from the rewritten summaries.
ALTER TABLE runs DISABLE TRIGGER count_finished;

WITH old AS (
    SELECT r.id, r.jobs_failed AS attempts_failed,
           coalesce(summary_count(r.summary, 'gaveUp'), 0) AS gave_up,
           coalesce(summary_count(r.summary, 'swept'), 0) AS swept,
           CASE WHEN jsonb_typeof(r.summary -> 'stages') = 'object' THEN r.summary -> 'stages'
                ELSE '{}'::jsonb END AS stages,
           r.summary
    FROM runs r
    WHERE jsonb_typeof(r.summary) = 'object'
), stage_split AS (
    -- each stage's failed attempts, and how many of the run's given-up jobs fall to it
    SELECT o.id, s.key,
           s.value,
           summary_count(s.value, 'failed') AS attempts,
           greatest(0, least(summary_count(s.value, 'failed'),
                             o.gave_up - o.swept - coalesce(sum(summary_count(s.value, 'failed'))
                                 OVER (PARTITION BY o.id ORDER BY s.key
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))) AS ended
    FROM old o CROSS JOIN LATERAL jsonb_each(o.stages) AS s
    WHERE jsonb_typeof(s.value) = 'object'
), new_stages AS (
    SELECT id, jsonb_object_agg(key, value || jsonb_build_object('failed', ended, 'retried', attempts - ended)) AS stages
    FROM stage_split GROUP BY id
), new_counts AS (
    SELECT o.id, coalesce(jsonb_object_agg(k.key, k.value)
                          FILTER (WHERE k.key NOT IN ('stages', 'gaveUp', 'lost', 'secondStreamBatches',
                                                      'errors', 'counts')), '{}'::jsonb) AS counts
    FROM old o LEFT JOIN LATERAL jsonb_each(o.summary) AS k ON true
    GROUP BY o.id
)
UPDATE runs r
SET jobs_failed = o.gave_up,
    jobs_retried = greatest(0, o.attempts_failed - (o.gave_up - o.swept)),
    summary = (r.summary - 'gaveUp') - coalesce((SELECT array_agg(k) FROM jsonb_object_keys(c.counts) AS k), '{}')
              || jsonb_build_object('stages', coalesce(n.stages, '{}'::jsonb), 'counts', c.counts)
FROM old o
JOIN new_counts c ON c.id = o.id
LEFT JOIN new_stages n ON n.id = o.id
WHERE r.id = o.id;

ALTER TABLE runs ENABLE TRIGGER count_finished;

-- The totals as 0022 keeps them, with retried.
CREATE OR REPLACE FUNCTION run_totals_add(rs runs[], sign integer) RETURNS void
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

    INSERT INTO job_type_totals AS t (type, done, failed, retried, deferred)
    SELECT s.key, sign * sum(summary_count(s.value, 'done')), sign * sum(summary_count(s.value, 'failed')),
           sign * sum(summary_count(s.value, 'retried')), sign * sum(summary_count(s.value, 'deferred'))
    FROM unnest(rs) AS r CROSS JOIN LATERAL jsonb_each(r.summary -> 'stages') AS s
    WHERE r.finished_at IS NOT NULL AND jsonb_typeof(r.summary -> 'stages') = 'object'
    GROUP BY s.key
    ORDER BY s.key
    ON CONFLICT (type)
    DO UPDATE SET done = t.done + excluded.done, failed = t.failed + excluded.failed,
                  retried = t.retried + excluded.retried, deferred = t.deferred + excluded.deferred;
$$;

DELETE FROM job_type_totals;
INSERT INTO job_type_totals (type, done, failed, retried, deferred)
SELECT s.key, sum(summary_count(s.value, 'done')), sum(summary_count(s.value, 'failed')),
       sum(summary_count(s.value, 'retried')), sum(summary_count(s.value, 'deferred'))
FROM runs r CROSS JOIN LATERAL jsonb_each(r.summary -> 'stages') AS s
WHERE r.finished_at IS NOT NULL AND jsonb_typeof(r.summary -> 'stages') = 'object'
GROUP BY s.key;

-- 'run.finished' says what the runs row says.
CREATE OR REPLACE FUNCTION runs_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM events_emit(ARRAY['system'], ARRAY['run.started'],
            ARRAY[jsonb_build_object('run', NEW.id, 'trigger', NEW.trigger, 'startedAt', NEW.started_at)]);
    ELSE
        PERFORM events_emit(ARRAY['system'], ARRAY['run.finished'],
            ARRAY[jsonb_build_object('run', NEW.id, 'trigger', NEW.trigger, 'stopReason', NEW.stop_reason,
                                     'jobsDone', NEW.jobs_done, 'jobsFailed', NEW.jobs_failed,
                                     'jobsRetried', NEW.jobs_retried,
                                     'jobsDeferred', NEW.jobs_deferred, 'error', NEW.error,
                                     'durationSeconds',
                                     round(extract(epoch FROM NEW.finished_at - NEW.started_at)::numeric, 3))]);
    END IF;
    RETURN NULL;
END $$;
