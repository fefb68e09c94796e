-- The stuck sweep's backstop for the claim's look for expired leases: each of :types' floor
-- of running lock times (job_running_floors) comes down to its oldest running job's, should a
-- claim have taken longer to commit than the floor's ten seconds allow. A walk of
-- jobs_running_idx from each type's first entry, once a minute, not once a claim.
SELECT job_running_floors_lower(array_agg(t.type), array_agg(o.locked_at))
FROM unnest(:types::text[]) AS t(type)
CROSS JOIN LATERAL (SELECT j.locked_at FROM jobs j
                    WHERE j.type = t.type AND j.status = 'running'
                    ORDER BY j.locked_at LIMIT 1) o
