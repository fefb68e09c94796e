-- records: 0013_queue outreach/0001_outreach
-- From the legacy chain's end state (0001..0012, one chain for the queue and the outreach
-- example together) to the split end state: the queue's chain (../0013_queue.sql) plus the
-- outreach plug-in's (app/outreach/sql/migrations/0001_outreach.sql). Data stays; afterwards
-- the database is what those two files make on an empty one, and app/engine/migrate.py
-- records them as applied (the line above names them). Runs once, in the migrator's transaction.

-- The policies that read campaign_id go first: the columns they name change below.
DROP POLICY tenant ON jobs;
DROP POLICY tenant ON batches;

-- jobs.lane was generated from campaign_id: it becomes a plain column (DROP EXPRESSION
-- keeps every row's value), the all-zero lane by default, and campaign_id goes (with
-- its foreign key: deleting a campaign now deletes its lane, see lanes_after_delete).
ALTER TABLE jobs ALTER COLUMN lane DROP EXPRESSION;
ALTER TABLE jobs ALTER COLUMN lane SET DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE jobs DROP COLUMN campaign_id;

-- A batch belongs to a lane. Every campaign has its lane row since 0012, so the new
-- foreign key holds for every batch.
ALTER TABLE batches DROP CONSTRAINT batches_campaign_id_fkey;
ALTER TABLE batches RENAME COLUMN campaign_id TO lane;
ALTER INDEX batches_campaign_idx RENAME TO batches_lane_idx;
DO $$
BEGIN
    -- PostgreSQL 18 names NOT NULL constraints after their column
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'batches_campaign_id_not_null') THEN
        ALTER TABLE batches RENAME CONSTRAINT batches_campaign_id_not_null TO batches_lane_not_null;
    END IF;
END $$;
INSERT INTO lanes (id) SELECT DISTINCT lane FROM batches ORDER BY lane ON CONFLICT (id) DO NOTHING;
ALTER TABLE batches ADD CONSTRAINT batches_lane_fkey
    FOREIGN KEY (lane) REFERENCES lanes (id) ON DELETE CASCADE;

-- Tenants own lanes: jobs and batches are filtered through their lane's owner.
CREATE POLICY tenant ON jobs USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
CREATE POLICY tenant ON batches USING ((SELECT app_is_admin()) OR lane IN
    (SELECT id FROM lanes WHERE owner_id = (SELECT app_user_id())));
ALTER TABLE lanes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON lanes USING ((SELECT app_is_admin()) OR owner_id = (SELECT app_user_id()));
GRANT SELECT ON lanes TO skiplock_api;
GRANT UPDATE (priority, paused) ON lanes TO skiplock_admin;
-- An operator's ranking (as skiplock_admin) reaches the counters through the trigger.
ALTER FUNCTION lanes_after_update() SECURITY DEFINER SET search_path = public, pg_temp;

-- A lane deleted takes its work with it: its jobs, its counters, and (foreign key) its
-- batches.
CREATE FUNCTION lanes_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM jobs WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lanes WHERE lane IN (SELECT id FROM old_lanes);
    DELETE FROM job_lane_hours WHERE lane IN (SELECT id FROM old_lanes);
    RETURN NULL;
END $$;
CREATE TRIGGER lanes_forget AFTER DELETE ON lanes
    REFERENCING OLD TABLE AS old_lanes FOR EACH STATEMENT EXECUTE FUNCTION lanes_after_delete();
