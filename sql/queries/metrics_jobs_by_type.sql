-- Job endings per type over every finished run, for /metrics: job_type_totals, kept by a
-- trigger from each finishing run's summary (runs.summary -> 'stages': {type: {done,
-- failed, deferred}}; migration 0022). `failed` counts failed attempts, retried or
-- given up.
SELECT type, done, failed, deferred FROM job_type_totals ORDER BY type
