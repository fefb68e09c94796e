-- Job endings per type, summed over the summaries of the finished runs started in the
-- last :within_seconds seconds (`skiplock status`; runs_started_idx finds them): done, failed (ended
-- failed), retried (failed attempts tried again) and deferred (summary_count: migration 0022).
SELECT s.key AS type,
       sum(summary_count(s.value, 'done'))::bigint AS done,
       sum(summary_count(s.value, 'failed'))::bigint AS failed,
       sum(summary_count(s.value, 'retried'))::bigint AS retried,
       sum(summary_count(s.value, 'deferred'))::bigint AS deferred
FROM runs r CROSS JOIN LATERAL jsonb_each(r.summary -> 'stages') AS s
WHERE r.started_at > now() - make_interval(secs => :within_seconds)
  AND r.finished_at IS NOT NULL AND jsonb_typeof(r.summary -> 'stages') = 'object'
GROUP BY s.key
ORDER BY s.key
