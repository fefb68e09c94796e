-- How many jobs of :type a claim may take now, for a stage limited as a whole: what
-- :concurrency leaves beside the jobs every run holds on a live lease (jobs_running_idx;
-- a dead holder's stop counting once their lease has expired, and the claim may take them
-- back), and what :rate leaves beside the starts of the last :window_seconds. A limit
-- given as NULL does not apply (least() passes over it).
SELECT greatest(0, least(
    :concurrency::int - (SELECT count(*) FROM jobs
                         WHERE type = :type AND status = 'running'
                           AND locked_at >= now() - make_interval(secs => :lease_seconds)),
    :rate::int - (SELECT count(*) FROM stage_starts
                  WHERE type = :type AND key = ''
                    AND started_at > clock_timestamp() - make_interval(secs => :window_seconds))
))::int
