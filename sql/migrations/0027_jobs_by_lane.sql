-- A tenant's GET /jobs reads its own lanes' jobs, not the whole table
-- (docs/performance.md#a-tenants-job-list).
--
-- Walking the primary key newest first and letting row-level security drop other
-- tenants' jobs made a page's cost grow with every tenant's jobs: 180 ms for a tenant with
-- ten jobs beside another with 300,000, and a key may send 600 requests a minute. This
-- index lets the listing take each of the caller's lanes newest first
-- (jobs_list_by_lanes.sql).
--
-- Kept off the hot path where it can be: running jobs are left out (a claim writes no
-- entry; the listing reads the few running jobs apart), and so is the all-zero lane (the
-- operator's: nobody owns it, no tenant lists it), so a queue without lanes pays nothing
-- and a job in a lane pays one entry when it ends. Building it takes a lock that holds
-- writes to jobs back until it is done: on a large table, migrate when the queue is quiet.
CREATE INDEX jobs_lane_list_idx ON jobs (lane, id)
    WHERE lane <> '00000000-0000-0000-0000-000000000000' AND status <> 'running';
