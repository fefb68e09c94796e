-- A running job reports how far it got (only while this run holds it).
UPDATE jobs SET progress = $2, total = coalesce($3, total)
WHERE id = $1 AND run_id = $4 AND status = 'running'
