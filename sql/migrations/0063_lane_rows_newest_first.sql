-- A lane's row is looked up by (lane, type), newest epoch first (ORDER BY epoch DESC LIMIT 1),
-- in the count every claim, ending and enqueue runs, in a lane's write and in the fold. Once
-- ANALYZE has seen one live row per lane, the planner read that lookup through a bitmap of
-- job_lanes_pkey: every version of the lane's row a held snapshot keeps (one per fold, 850
-- per lane after a quarter of an hour), fetched and sorted, where the index read backwards
-- stops at the first. Without bitmaps inside these functions it reads the index in order.
ALTER FUNCTION job_lanes_count(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                               timestamptz[], timestamptz[], boolean) SET enable_bitmapscan = off;
ALTER FUNCTION job_lanes_write(text[], uuid[], integer[], integer[], timestamptz[], timestamptz[],
                               timestamptz[], timestamptz[]) SET enable_bitmapscan = off;
ALTER FUNCTION job_lanes_fold() SET enable_bitmapscan = off;
