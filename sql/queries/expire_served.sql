-- Forget "served" counts older than a day: drop the old hourly rows and subtract
-- them from the lane totals. Run at the start of every pipeline run.
WITH old AS (
    DELETE FROM job_lane_hours
    WHERE hour < date_trunc('hour', now()) - interval '23 hours'
    RETURNING type, lane, served
), per_lane AS (
    SELECT type, lane, sum(served)::int AS served FROM old GROUP BY type, lane
)
UPDATE job_lanes l
SET served = l.served - p.served
FROM (SELECT * FROM per_lane ORDER BY type, lane) p
WHERE l.type = p.type AND l.lane = p.lane
