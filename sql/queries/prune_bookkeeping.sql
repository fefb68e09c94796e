-- Forget old recurring ticks and fairness lanes with nothing waiting and nothing served.
-- A task's newest tick stays whatever its age: it is what says its current period was
-- served (a weekly stage's period is older than two days for most of the week).
WITH ticks AS (
    DELETE FROM recurring_ticks t
    WHERE t.period < now() - interval '2 days'
      AND EXISTS (SELECT 1 FROM recurring_ticks n WHERE n.task = t.task AND n.period > t.period)
    RETURNING 1
), lanes AS (
    -- and nothing in the journal for them
    DELETE FROM job_lanes l WHERE l.pending = 0 AND l.served = 0
      AND NOT EXISTS (SELECT 1 FROM job_lane_journal n
                      WHERE n.type = l.type AND n.lane = l.lane AND n.xid >= mark_or_start(l.journal_from))
    RETURNING l.type, l.lane
), keys AS (
    DELETE FROM job_lane_keys k USING lanes d WHERE k.lane = d.lane AND k.type = d.type
    RETURNING 1
)
SELECT (SELECT count(*) FROM ticks) + (SELECT count(*) FROM keys)
