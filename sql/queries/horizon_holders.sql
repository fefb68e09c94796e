-- What holds back the xmin horizon, before which VACUUM may remove no row version: the
-- :limit oldest holders, oldest first (by how many xids behind they are), across the cluster:
--   session: a backend with a snapshot (backend_xmin) in this database, or with an xid
--     (backend_xid) in any: every snapshot taken here meanwhile starts before that xid.
--     A physical walsender (no database) has an xmin when its replica sends
--     hot_standby_feedback without a slot. A snapshot alone in another database pins
--     nothing here. The reader itself (and its parallel workers) is left out.
--   prepared: a prepared transaction not yet committed or rolled back.
--   slot: a replication slot's xmin (a replica's feedback), or its catalog_xmin (logical
--     decoding: holds back the system catalogs only), one row each.
-- seconds: how long it has held on, since its transaction started (xact_start), it was
-- prepared, or the slot went inactive (inactive_since, PostgreSQL 17 and later: read
-- through to_jsonb, so the text runs on 15 and 16 too). NULL when unknown: an active slot,
-- a walsender, or a session of another role when the reader is not a member of
-- pg_read_all_stats, which hides its xact_start, state and query (its pid, role,
-- application_name and xids stay visible; query is then NULL here).
WITH holders AS (
    SELECT 'session' AS kind, a.pid, a.application_name AS name, a.usename::text AS role,
           a.datname::text AS database, a.state,
           CASE WHEN a.state IS NOT NULL THEN left(a.query, 200) END AS query,  -- else '<insufficient privilege>'
           extract(epoch FROM now() - a.xact_start)::float8 AS seconds,
           greatest(CASE WHEN a.datname = current_database() OR a.datid IS NULL THEN age(a.backend_xmin) END,
                    age(a.backend_xid)) AS xid_age
    FROM pg_stat_activity a
    WHERE a.pid <> pg_backend_pid() AND a.leader_pid IS DISTINCT FROM pg_backend_pid()
    UNION ALL
    SELECT 'prepared', NULL, p.gid, p.owner::text, p.database::text, NULL, NULL,
           extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)
    FROM pg_prepared_xacts p
    UNION ALL
    SELECT 'slot', s.active_pid, s.slot_name::text, NULL, s.database::text,
           concat_ws(', ', s.slot_type, CASE WHEN s.active THEN 'active' ELSE 'inactive' END, h.holds),
           NULL,
           CASE WHEN NOT s.active
                THEN extract(epoch FROM now() - (to_jsonb(s) ->> 'inactive_since')::timestamptz)::float8 END,
           age(h.xmin)
    FROM pg_replication_slots s
    CROSS JOIN LATERAL (VALUES ('xmin', s.xmin), ('catalog_xmin', s.catalog_xmin)) AS h (holds, xmin)
    WHERE h.xmin IS NOT NULL
)
SELECT kind, pid, name, role, database, state, query, seconds, xid_age
FROM holders
WHERE xid_age IS NOT NULL
ORDER BY xid_age DESC, seconds DESC NULLS LAST
LIMIT :limit
