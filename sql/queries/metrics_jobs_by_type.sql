-- Job endings per type over every finished run, for /metrics: job_type_totals, kept by a
-- trigger from each finishing run's summary (runs.summary -> 'stages': {type: {done,
-- failed, retried, deferred}}; migrations 0022 and 0036).
SELECT type, done, failed, retried, deferred FROM job_type_totals ORDER BY type
