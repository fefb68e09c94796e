SELECT id FROM drafts WHERE job_id = :job_id
