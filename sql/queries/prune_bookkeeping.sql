-- Forget old recurring ticks and fairness lanes with nothing waiting and nothing served.
WITH ticks AS (
    DELETE FROM recurring_ticks WHERE period < now() - interval '2 days' RETURNING 1
), lanes AS (
    DELETE FROM job_lanes WHERE pending = 0 AND served = 0 RETURNING 1
)
SELECT (SELECT count(*) FROM ticks) + (SELECT count(*) FROM lanes)
