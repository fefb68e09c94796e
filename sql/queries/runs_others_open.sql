-- Whether any run but :run_id is open and alive (beat within the last :silent_seconds seconds): a run alone
-- on the queue may claim on its second connection too (app/pipeline/loop.py); runs that
-- overlap leave the server's CPUs to each other.
SELECT EXISTS (
    SELECT 1 FROM runs
    WHERE finished_at IS NULL AND id <> :run_id AND heartbeat_at > now() - make_interval(secs => :silent_seconds)
)
