-- Forget "served" counts older than a day. The hours that have passed are dropped from
-- job_lane_hours and their counts go to the lane journal, negative and with no hour: the next
-- fold takes them off the rows, and a claim counts them before that. A lane idle for a
-- day still holds its last hour in its row: that hour is taken off the row at once.
WITH old AS (
    DELETE FROM job_lane_hours
    WHERE hour < date_trunc('hour', now()) - interval '23 hours'
    RETURNING type, lane, served
), idle AS (
    UPDATE job_lanes l SET served = l.served - l.hour_served, hour_served = 0
    WHERE l.hour_at < date_trunc('hour', now()) - interval '23 hours' AND l.hour_served <> 0
    RETURNING 1
)
INSERT INTO job_lane_journal (type, lane, pending, served)
SELECT type, lane, 0, -sum(served)::int FROM old GROUP BY type, lane ORDER BY type, lane
