-- Mark jobs done, but only those run :run_id still holds: a run that lost its lease
-- (the job was reclaimed by another run) changes nothing. The status through an
-- expression, so the ids are found by primary key (see claim.sql).
UPDATE jobs
SET status = 'done', finished_at = now()
WHERE id = ANY(:ids::uuid[]) AND run_id = :run_id AND (status || '') = 'running'
RETURNING id
