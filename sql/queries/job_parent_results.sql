-- The results of the jobs job :job_id waits for (its parents), by parent id: NULL for a
-- parent whose handler returned nothing (or that was run anyway after it failed).
SELECT p.id, p.status, p.result
FROM jobs c
JOIN jobs p ON p.id = ANY (c.parents)
WHERE c.id = :job_id
