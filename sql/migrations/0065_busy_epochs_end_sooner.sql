-- A busy queue folds up to ten times a second. Every claim weighs its lanes with the
-- journal's lines since the last fold and probes each lane from the head the last fold
-- wrote, past the jobs claimed since: with ten runs claiming at once, a second's worth of
-- lines and claimed jobs made most of a claim's time. An epoch now ends after a second, or
-- after a tenth of one once 50 transactions have begun in the cluster since it started:
-- the fold that began it noted the first id not yet given out (job_xid_times, migration
-- 0060), so the newest note says where the epoch began. A quiet queue folds once a second
-- as before; a fold with no lines since the last one still writes nothing.
CREATE OR REPLACE FUNCTION job_lanes_fold_if_due() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    began timestamptz := (SELECT e.at FROM job_lane_epochs e ORDER BY e.epoch DESC LIMIT 1);
BEGIN
    IF began > now() - interval '100 milliseconds' THEN
        RETURN false;
    END IF;
    IF began > now() - interval '1 second'
       AND pg_snapshot_xmax(pg_current_snapshot())::text::numeric
           - coalesce((SELECT t.xid FROM job_xid_times t ORDER BY t.xid DESC LIMIT 1), '0')::text::numeric < 50 THEN
        RETURN false;
    END IF;
    PERFORM job_lanes_fold();
    RETURN true;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_fold_if_due() FROM PUBLIC;
