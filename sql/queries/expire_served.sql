-- Forget "served" counts older than a day: drop the old hourly rows and subtract
-- them from the lane totals. Run at the start of every pipeline run. The lane rows are
-- locked in (type, lane) order, the order the jobs triggers take them in, so this cannot
-- deadlock with a claim that counts the same lanes.
WITH old AS (
    DELETE FROM job_lane_hours
    WHERE hour < date_trunc('hour', now()) - interval '23 hours'
    RETURNING type, lane, served
), per_lane AS (
    SELECT type, lane, sum(served)::int AS served FROM old GROUP BY type, lane
), locked AS (
    SELECT l.type, l.lane, p.served
    FROM job_lanes l
    JOIN per_lane p ON p.type = l.type AND p.lane = l.lane
    ORDER BY l.type, l.lane
    FOR NO KEY UPDATE OF l
)
UPDATE job_lanes l
SET served = l.served - k.served
FROM locked k
WHERE l.type = k.type AND l.lane = k.lane
