"""Audit retention: maintenance deletes audit rows older than AUDIT_RETENTION_DAYS, oldest
first and a bounded number a pass; for everyone else the log stays append-only."""

from __future__ import annotations

import asyncpg
import pytest

from app.engine import audit
from app.engine.accounts import authenticate
from app.engine.tenancy import tenant_transaction
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import AUDIT_PRUNE_BATCHES, PRUNE_BATCH, RECURRING
from app.settings import load_settings
from tests import factories as f


def settings(**kw):
    return load_settings(database_url="postgresql://unused", **kw)


async def old_rows(pool, n: int, days: float, table: str = "jobs") -> None:
    """`n` audit rows from `days` days ago, a millisecond apart (the first is the oldest)."""
    await pool.execute(
        "INSERT INTO audit_log (at, actor_kind, actor_id, table_name, op) "
        "SELECT now() - make_interval(days => $2) + i * interval '1 millisecond', 'system', 'tests', $3, 'INSERT' "
        "FROM generate_series(1, $1) i", n, float(days), table)


async def next_period(pool) -> None:
    """As if the next maintenance period had come: each recurring task is due again."""
    await pool.execute("UPDATE recurring_ticks SET period = period - interval '1 day'")


async def test_a_maintenance_run_prunes_past_the_retention_oldest_first_a_bounded_number_a_pass(pool):
    bound = AUDIT_PRUNE_BATCHES * PRUNE_BATCH
    await old_rows(pool, bound + 500, days=400, table="past")
    await old_rows(pool, 3, days=300, table="kept")
    await old_rows(pool, 2, days=0.01, table="kept")
    newest_past = {r["id"] for r in await pool.fetch(
        "SELECT id FROM audit_log WHERE table_name = 'past' ORDER BY at DESC LIMIT 500")}
    s = settings(audit_retention_days=365)

    first = await Pipeline(pool, [], s).run("cron")
    assert first.summary["counts"]["audit_pruned"] == bound
    left = await pool.fetch("SELECT table_name, count(*) FROM audit_log GROUP BY 1")
    assert {r["table_name"]: r["count"] for r in left} == {"past": 500, "kept": 5}
    # the oldest went first: what is left of the old rows is their newest 500
    assert {r["id"] for r in await pool.fetch("SELECT id FROM audit_log WHERE table_name = 'past'")} == newest_past

    await next_period(pool)
    second = await Pipeline(pool, [], s).run("cron")
    assert second.summary["counts"]["audit_pruned"] == 500
    assert await pool.fetchval("SELECT count(*) FROM audit_log WHERE table_name = 'kept'") == 5
    assert await pool.fetchval("SELECT count(*) FROM audit_log") == 5

    await next_period(pool)
    third = await Pipeline(pool, [], s).run("cron")
    assert "audit_pruned" not in third.summary
    assert await pool.fetchval("SELECT count(*) FROM audit_log") == 5


async def test_a_retention_of_0_keeps_every_row(pool):
    await old_rows(pool, 10, days=30_000)
    result = await Pipeline(pool, [], settings(audit_retention_days=0)).run("cron")
    assert result.summary["stages"]["maintenance"]["done"] == len(RECURRING)  # prune_audit ran, and kept all
    assert "audit_pruned" not in result.summary
    assert await pool.fetchval("SELECT count(*) FROM audit_log") == 10


async def test_pruning_reads_the_old_end_of_the_time_index_not_the_table(pool):
    await old_rows(pool, 5000, days=400)
    await old_rows(pool, 5000, days=1)
    await pool.execute("ANALYZE audit_log")
    scans = ("SELECT pg_stat_get_xact_numscans('audit_log'::regclass) AS table_scans, "
             "pg_stat_get_xact_numscans('audit_log_at_idx'::regclass) AS time_index_scans")
    async with pool.acquire() as conn, conn.transaction():
        # the session's counts not flushed yet are in these too: measured within one transaction
        before = await conn.fetchrow(scans)
        assert await audit.prune(conn, 365, PRUNE_BATCH) == PRUNE_BATCH
        after = await conn.fetchrow(scans)
    assert after["table_scans"] - before["table_scans"] == 0
    assert after["time_index_scans"] - before["time_index_scans"] == 1


@pytest.mark.parametrize("admin", [False, True])
async def test_api_keys_still_cannot_delete_audit_rows(pool, admin):
    key = await f.api_key(pool, "ann@a.example", admin=admin)
    await old_rows(pool, 5, days=400)
    actor = await authenticate(pool, key)
    attempts = {
        # the announcement the prune function makes, made by hand, then a plain DELETE
        "delete": ["SELECT set_config('skiplock.audit_prune_before', '99999999999', true)",
                   "DELETE FROM audit_log"],
        "prune": ["SELECT audit_log_prune(now(), 1000)"],
    }
    for name, statements in attempts.items():
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            async with tenant_transaction(pool, actor) as conn:
                for sql in statements:
                    await conn.execute(sql)
    assert await pool.fetchval("SELECT count(*) FROM audit_log WHERE table_name = 'jobs'") == 5


async def test_the_owner_deletes_only_through_the_prune_and_only_past_its_cutoff(pool):
    await old_rows(pool, 2, days=400)
    await old_rows(pool, 2, days=1, table="recent")
    async with pool.acquire() as conn:
        # a plain DELETE, the owner's included, is refused (tests/api/test_tenants.py too)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await conn.execute("DELETE FROM audit_log")
        # a cutoff announced a year back lets through no row younger than it
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            async with conn.transaction():
                await conn.execute("SELECT set_config('skiplock.audit_prune_before', "
                                   "extract(epoch FROM now() - interval '365 days')::text, true)")
                await conn.execute("DELETE FROM audit_log WHERE table_name = 'recent'")
        assert await audit.prune(conn, 365, PRUNE_BATCH) == 2
        # the prune withdrew its cutoff: the same transaction cannot delete on it afterwards
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            async with conn.transaction():
                assert await audit.prune(conn, 365, PRUNE_BATCH) == 0
                await conn.execute("DELETE FROM audit_log")
    assert await pool.fetchval("SELECT count(*) FROM audit_log") == 2
