-- Delete up to $2 audit rows older than $1 days, oldest first; the count. Only through
-- audit_log_prune() (migration 0030): the log refuses any other DELETE.
SELECT audit_log_prune(now() - make_interval(days => $1), $2)
