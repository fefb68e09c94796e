-- A busy queue folds up to ten times a second. Every claim weighs its lanes with the
-- journal's lines since the last fold and probes each lane from the head the last fold
-- wrote, past the jobs claimed since: with ten runs claiming at once, a second's worth of
-- lines and claimed jobs made most of a claim's time. An epoch now ends after a second, or
-- after a tenth of one once 50 transactions have begun in the cluster since it started
-- (the epoch notes the first id not yet given out). A quiet queue folds once a second as
-- before; a fold with no lines since the last one still writes nothing.
ALTER TABLE job_lane_epochs ADD COLUMN xid xid8 NOT NULL DEFAULT pg_snapshot_xmax(pg_current_snapshot());

CREATE OR REPLACE FUNCTION job_lanes_fold_if_due() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    began timestamptz; began_xid xid8;
BEGIN
    SELECT e.at, e.xid INTO began, began_xid FROM job_lane_epochs e ORDER BY e.epoch DESC LIMIT 1;
    IF began > now() - interval '1 second'
       AND (began > now() - interval '100 milliseconds'
            OR pg_snapshot_xmax(pg_current_snapshot())::text::numeric - began_xid::text::numeric < 50) THEN
        RETURN false;
    END IF;
    PERFORM job_lanes_fold();
    RETURN true;
END $$;
REVOKE EXECUTE ON FUNCTION job_lanes_fold_if_due() FROM PUBLIC;
