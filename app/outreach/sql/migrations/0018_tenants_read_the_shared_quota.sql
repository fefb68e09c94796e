-- The shared quota's daily row (units, reserve, spent) is one number for everyone, and
-- every tenant's dashboard shows it. The API roles may read it, so GET /stats reads it on
-- the request's own connection. It was read from the pool as the tables' owner while the
-- request held its transaction, a second connection from the same pool: as many /stats at
-- once as the pool has connections then waited for each other for ever, and every
-- request behind them with them (found by an attack pass through a real PgBouncer).
GRANT SELECT ON quota_ledger TO skiplock_api;
