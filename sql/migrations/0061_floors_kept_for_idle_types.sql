-- A type's floor of running lock times is carried into every epoch once it has one
-- (migration 0060 dropped it when the type had no running job and the fold took none of its
-- lanes). Without a floor, the next claim's and the stuck sweep's look for expired leases
-- walked jobs_running_idx from its first entry: while a snapshot is held, every job of the
-- type run since. One row per type that ever ran.
CREATE OR REPLACE FUNCTION job_running_floors_next(now_epoch bigint, folded_types text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    open_since timestamptz;
BEGIN
    -- now() is this transaction's start, before the snapshot whose xmax is noted
    INSERT INTO job_xid_times (xid, at) VALUES (pg_snapshot_xmax(pg_current_snapshot()), now())
    ON CONFLICT (xid) DO NOTHING;
    -- a new statement, a new snapshot: the oldest transaction still open, and when ids from
    -- below it were first given out
    SELECT t.at INTO open_since FROM job_xid_times t
    WHERE t.xid <= pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY t.xid DESC LIMIT 1;
    -- a later snapshot again: every claim that committed before it is seen, every one still
    -- open is at or above the oldest open id
    WITH types AS (
        SELECT f.type, f.floor_at AS old_floor FROM job_running_floors f WHERE f.epoch = now_epoch
        UNION
        SELECT DISTINCT t.type, '-infinity'::timestamptz FROM unnest(folded_types) AS t(type)
        WHERE NOT EXISTS (SELECT 1 FROM job_running_floors f WHERE f.epoch = now_epoch AND f.type = t.type)
    ), floors AS (
        SELECT t.type, t.old_floor,
               (SELECT j.locked_at FROM jobs j
                WHERE j.type = t.type AND j.status = 'running' AND j.locked_at >= t.old_floor
                ORDER BY j.locked_at LIMIT 1) AS oldest
        FROM types t
    )
    INSERT INTO job_running_floors (epoch, type, floor_at)
    SELECT now_epoch + 1, f.type,
           -- never below the old floor (it only moves up); with no time noted for the
           -- oldest open transaction (older than an hour, or none noted yet) it stays
           greatest(f.old_floor, least(f.oldest, coalesce(open_since - interval '1 second', f.old_floor)))
    FROM floors f
    WHERE f.oldest IS NOT NULL OR f.type = ANY (folded_types) OR f.old_floor > '-infinity';
    DELETE FROM job_running_floors WHERE epoch <= now_epoch;
    -- an hour of notes is kept; pruned once a minute (a few thousand rows)
    IF now_epoch % 60 = 0 THEN
        DELETE FROM job_xid_times WHERE at < now() - interval '1 hour';
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION job_running_floors_next(bigint, text[]) FROM PUBLIC;
