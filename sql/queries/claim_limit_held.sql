-- How many jobs of :type every run holds now on a live lease (jobs_running_idx): a dead
-- holder's stop counting once their lease has expired, and the claim may take them back.
SELECT count(*)::int FROM jobs
WHERE type = :type AND status = 'running' AND locked_at >= now() - make_interval(secs => :lease_seconds)
