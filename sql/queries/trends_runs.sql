-- Finished runs started since :since, per bucket of :bucket_seconds (date_bin from the
-- epoch) and stop reason. runs_started_idx finds them; row-level security shows runs to
-- admins only (a tenant's answer is empty). The bound above ('infinity', which no run
-- starts at) makes the range two-sided: a generic plan then expects a narrow range and
-- walks the index, where with :since alone it expects a third of the runs and reads them all.
SELECT date_bin(make_interval(secs => :bucket_seconds), started_at, 'epoch'::timestamptz) AS bucket,
       stop_reason, count(*)::int AS runs
FROM runs
WHERE started_at >= :since::timestamptz AND started_at < 'infinity' AND stop_reason IS NOT NULL
GROUP BY bucket, stop_reason
ORDER BY bucket, stop_reason
