-- Job endings per type, for /metrics: job_type_totals. done, failed, retried and deferred
-- are kept by a trigger from each finishing run's summary (runs.summary -> 'stages':
-- {type: {done, failed, retried, deferred}}; migrations 0022 and 0036); cancelled by a
-- trigger on jobs, as each job ends cancelled, in a run or not (migration 0049).
SELECT type, done, failed, retried, deferred, cancelled FROM job_type_totals ORDER BY type
