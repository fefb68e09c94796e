-- Forget old recurring ticks and fairness lanes with nothing waiting and nothing served.
-- A task's newest tick stays whatever its age: it is what says its current period was
-- served (a weekly stage's period is older than two days for most of the week).
WITH ticks AS (
    DELETE FROM recurring_ticks t
    WHERE t.period < now() - interval '2 days'
      AND EXISTS (SELECT 1 FROM recurring_ticks n WHERE n.task = t.task AND n.period > t.period)
    RETURNING 1
), lanes AS (
    DELETE FROM job_lanes WHERE pending = 0 AND served = 0 RETURNING 1
)
SELECT (SELECT count(*) FROM ticks) + (SELECT count(*) FROM lanes)
