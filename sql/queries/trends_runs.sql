-- Finished runs started since :since, per bucket of :bucket_seconds (date_bin from the
-- epoch) and stop reason. runs_started_idx finds them; row-level security shows runs to
-- admins only (a tenant's answer is empty).
SELECT date_bin(make_interval(secs => :bucket_seconds), started_at, 'epoch'::timestamptz) AS bucket,
       stop_reason, count(*)::int AS runs
FROM runs
WHERE started_at >= :since::timestamptz AND stop_reason IS NOT NULL
GROUP BY bucket, stop_reason
ORDER BY bucket, stop_reason
