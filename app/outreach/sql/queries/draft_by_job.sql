SELECT id FROM drafts WHERE job_id = $1
