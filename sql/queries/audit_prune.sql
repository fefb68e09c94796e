-- Delete up to :limit audit rows older than :retention_days days, oldest first; the count. Only through
-- audit_log_prune() (migration 0030): the log refuses any other DELETE.
SELECT audit_log_prune(now() - make_interval(days => :retention_days), :limit)
