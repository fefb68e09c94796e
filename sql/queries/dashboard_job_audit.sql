-- What people did to job :job_id (its audited changes), newest first, the last :limit:
-- who, when, and the status and error before and after. Admins only (the log's policy).
SELECT at, actor_kind, actor_id, op, old_row ->> 'status' AS old_status, new_row ->> 'status' AS new_status,
       new_row ->> 'last_error' AS last_error
FROM audit_log
WHERE table_name = 'jobs' AND row_id = (:job_id::uuid)::text
ORDER BY at DESC, id DESC
LIMIT :limit
