-- What the handlers of jobs this run still holds returned, kept as each job's result
-- before the jobs are marked done (parallel arrays :ids, :results: each one's JSON text;
-- text, since an array of jsonb would take a JSON list for one of its dimensions).
UPDATE jobs j
SET result = r.result::jsonb
FROM unnest(:ids::uuid[], :results::text[]) AS r(id, result)
WHERE j.id = r.id AND j.run_id = :run_id AND j.status = 'running'
