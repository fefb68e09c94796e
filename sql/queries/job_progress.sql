-- A running job reports how far it got (only while this run holds it).
UPDATE jobs SET progress = :progress, total = coalesce(:total, total)
WHERE id = :job_id AND run_id = :run_id AND status = 'running'
