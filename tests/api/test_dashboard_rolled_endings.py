"""The last day's endings from minutes rolled up (migration 0055: per minute for the queue
card, per half hour with the waits for a day of trends): /stats's queue card and a
day of trends give the figures the jobs give (the wait percentiles within the classes'
bound), an admin every lane's, a tenant its own; concurrent readers count each minute
once; pruning a job leaves a closed minute's figures alone; and a day's read stays flat as
jobs end by the ten thousand in minutes already rolled up."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from app.engine import accounts
from app.engine.ended_minutes import roll_up_endings
from app.engine.jobs import DEFAULT_LANE
from app.engine.queries import statement
from app.engine.queue_stats import OPEN_COUNT_CAP, jobs_by_type
from app.engine.tenancy import tenant_transaction
from app.engine.trends import WINDOWS, bucket_starts, stage_trends
from bench.explain import buffers_touched, explain
from tests import factories as f
from tests.api.test_dashboard_bounded_reads import QUEUE_COUNTED
from tests.api.test_trends_api import _ended

DAY = WINDOWS["day"]
ENDED = ("done", "failed", "cancelled")


async def _day(pool) -> None:
    """Endings over the last day in lanes of two tenants, an ownerless one and the all-zero
    lane: every status, waits from none to hours, some never claimed; and some before."""
    alice = await f.tenant(pool, "alice@a.example")
    bob = await f.tenant(pool, "bob@b.example")
    lanes = [alice.lane, await f.lane(pool, alice.user_id), bob.lane, await f.lane(pool, None), DEFAULT_LANE]
    for i, lane in enumerate(lanes):
        for minutes, waited in ((3 + i, 0.0), (47, 0.0004), (95 + i, 0.25), (400, 3.0), (1430 - i, 7200.0)):
            await _ended(pool, lane, "record", "done", minutes + 0.3, waited, n=2 + i)
            await _ended(pool, lane, "export", "failed", minutes + 0.6, waited * 3, n=1 + i)
            await _ended(pool, lane, "record", "cancelled", minutes + 0.1, 0.0)
        await _ended(pool, lane, "record", "done", 25 * 60, 1.0, n=3)  # before the day
    await pool.execute("UPDATE jobs SET locked_at = NULL WHERE id IN "
                       "(SELECT id FROM jobs WHERE status = 'done' ORDER BY id LIMIT 7)")  # never claimed
    return alice, bob


def _endings(card: list[dict]) -> list[tuple]:
    return [(r["type"], r["done"], r["failed"], r["cancelled"]) for r in card if r["done"] or r["failed"] or r["cancelled"]]


async def _read(conn, own_lanes: bool, since: datetime) -> tuple[list, list, list]:
    """(the card's endings, the same counted from the jobs, [(trends' day rows, the live
    statement's rows)])."""
    card = [dict(r) for r in await conn.fetch(*statement("dashboard_queue").bind(own_lanes=own_lanes, cap=OPEN_COUNT_CAP))]
    counted = [dict(r) for r in await conn.fetch(QUEUE_COUNTED, OPEN_COUNT_CAP)]
    rolled = await conn.fetch(*statement("trends_jobs_by_half_hour").bind(since=since, bucket_seconds=1800, own_lanes=own_lanes))
    live = await conn.fetch(*statement("trends_jobs").bind(since=since, bucket_seconds=1800, own_lanes=own_lanes))
    return _endings(card), _endings(counted), [dict(r) for r in rolled], [dict(r) for r in live]


def _same_trends(rolled: list[dict], live: list[dict]) -> None:
    """The same counts per stage and bucket; each percentile within 2^(1/8) of the exact
    one, or a millisecond below 1 ms."""
    assert [(r["type"], r["bucket"], r["done"], r["failed"]) for r in rolled] == \
           [(r["type"], r["bucket"], r["done"], r["failed"]) for r in live]
    for a, b in zip(rolled, live):
        for p in ("wait_p50", "wait_p95"):
            if b[p] is None:
                assert a[p] is None, (a, b)
            else:
                assert abs(a[p] - b[p]) <= max(b[p] * (2 ** 0.125 - 1), 0.001) + 1e-9, (p, a, b)


async def test_the_rolled_up_day_equals_the_jobs_for_an_admin_and_each_tenant(pool):
    alice, bob = await _day(pool)
    admin = await f.tenant(pool, "root@a.example", admin=True)
    since = bucket_starts(DAY, datetime.now(timezone.utc))[0]
    await roll_up_endings(pool)
    rolled_to = await pool.fetchval("SELECT rolled_to FROM job_endings_rolled")
    assert rolled_to > datetime.now(timezone.utc) - timedelta(minutes=3)  # the minutes read are the rollups'
    assert await pool.fetchval("SELECT count(*) FROM job_endings_by_minute WHERE lane IS NULL") > 10
    await _ended(pool, alice.lane, "record", "done", 0.01, 1.0, n=4)  # the open minute: read live
    seen = {}
    for who in (admin, alice, bob):
        actor = await accounts.authenticate(pool, who.key)
        async with tenant_transaction(pool, actor) as conn:
            card, counted, rolled, live = await _read(conn, not actor.is_admin, since)
        assert card == counted and card, (who.key, card, counted)
        _same_trends(rolled, live)
        assert rolled
        seen[who.key] = card
    assert seen[alice.key] != seen[bob.key]  # each tenant its own lanes' figures
    assert sum(r[1] for r in seen[alice.key]) + sum(r[1] for r in seen[bob.key]) < sum(r[1] for r in seen[admin.key])


async def test_the_app_rolls_up_as_it_reads(pool):
    """jobs_by_type and stage_trends roll the closed minutes up before they read."""
    alice, _ = await _day(pool)
    actor = await accounts.authenticate(pool, alice.key)
    starts = bucket_starts(DAY, datetime.now(timezone.utc))
    async with tenant_transaction(pool, actor) as conn:
        card = await jobs_by_type(conn, own_lanes=True)
        trends = await stage_trends(conn, DAY, starts, own_lanes=True)
    assert await pool.fetchval("SELECT count(*) FROM job_endings_by_minute") > 0
    async with tenant_transaction(pool, actor) as conn:
        _, counted, _, live = await _read(conn, True, starts[0])
    assert _endings(card) == counted
    assert [(s["type"], p["done"], p["failed"]) for s in trends for p in s["points"] if p["done"] or p["failed"]] == \
           [(r["type"], r["done"], r["failed"]) for r in live]


async def test_a_pruned_job_leaves_its_closed_minute_alone(pool):
    await _day(pool)
    since = bucket_starts(DAY, datetime.now(timezone.utc))[0]
    await roll_up_endings(pool)
    async with pool.acquire() as conn:
        before = await _read(conn, False, since)
    await pool.execute("DELETE FROM jobs WHERE finished_at < now() - interval '1 hour'")  # pruned
    async with pool.acquire() as conn:
        after = await _read(conn, False, since)
    assert after[0] == before[0] and after[2] == before[2]  # the card, the rolled-up trends: as they were
    assert after[1] != before[1]  # the jobs counted now miss the pruned ones


async def test_concurrent_readers_count_each_minute_once(pool):
    """Twelve readers at once, each rolling up and reading in its own transaction, from
    nothing rolled up; then one that holds the roll-up open while others read: every
    reader sees the jobs' figures, and each minute's rows are written once."""
    await _day(pool)
    since = bucket_starts(DAY, datetime.now(timezone.utc))[0]
    async with pool.acquire() as conn:
        _, counted, _, live = await _read(conn, False, since)
    start = asyncio.Event()

    async def reader():
        async with pool.acquire() as conn, conn.transaction():
            await start.wait()
            await roll_up_endings(conn)
            return await _read(conn, False, since)

    readers = [asyncio.create_task(reader()) for _ in range(12)]
    await asyncio.sleep(0.2)
    start.set()
    for card, _, rolled, _ in await asyncio.gather(*readers):
        assert card == counted
        _same_trends(rolled, live)
    rows = await pool.fetchval("SELECT sum(jobs) FROM job_endings_by_minute WHERE lane IS NULL")
    assert rows == await pool.fetchval("SELECT count(*) FROM jobs, job_endings_rolled WHERE status = ANY($1) "
                                       "AND finished_at >= rolled_from AND finished_at < rolled_to", list(ENDED))
    assert rows == await pool.fetchval("SELECT sum(jobs) FROM job_endings_by_minute WHERE lane IS NOT NULL")
    assert rows == await pool.fetchval("SELECT sum(jobs) FROM job_endings_by_half_hour WHERE lane IS NULL")
    assert rows == await pool.fetchval("SELECT sum(n) FROM job_endings_by_half_hour, unnest(wait_counts) n "
                                       "WHERE lane IS NOT NULL") + await pool.fetchval(
        "SELECT count(*) FROM jobs, job_endings_rolled WHERE status = ANY($1) AND locked_at IS NULL "
        "AND finished_at >= rolled_from AND finished_at < rolled_to", list(ENDED))

    # one rolls up and holds its transaction open: the others neither wait nor miss a minute
    await pool.execute("DELETE FROM job_endings_by_minute")
    await pool.execute("DELETE FROM job_endings_by_half_hour")
    await pool.execute("UPDATE job_endings_rolled SET rolled_from = '-infinity', rolled_to = '-infinity'")
    async with pool.acquire() as holder, holder.transaction():
        await roll_up_endings(holder)
        others = await asyncio.wait_for(asyncio.gather(*(reader() for _ in range(4))), timeout=10)
        assert all(card == counted for card, *_ in others)
    async with pool.acquire() as conn:
        card, again, _, _ = await _read(conn, False, since)
    assert card == again == counted


async def _day_reads(pool, key, since) -> dict[str, int]:
    actor = await accounts.authenticate(pool, key)
    own_lanes = not actor.is_admin
    async with tenant_transaction(pool, actor) as conn:
        await roll_up_endings(conn)
        out = {}
        for name, (sql, *args) in (
                ("dashboard_queue", statement("dashboard_queue").bind(own_lanes=own_lanes, cap=OPEN_COUNT_CAP)),
                ("trends_jobs_by_half_hour", statement("trends_jobs_by_half_hour").bind(since=since, bucket_seconds=1800,
                                                                                  own_lanes=own_lanes))):
            out[name] = buffers_touched(await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, COSTS OFF"))
        return out


async def test_a_days_reads_stay_flat_as_jobs_end_by_the_ten_thousand(pool):
    """A few endings in each of 12 minutes over the day, then 60,000 more in the same
    minutes (the day rolled up again from nothing, as if they had ended there): an admin's
    and a tenant's day reads as much as before (a heap row per ending, before migration
    0055)."""
    alice = await f.tenant(pool, "alice@a.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    other = await f.lane(pool, None)
    minutes = range(30, 1400, 120)
    for lane in (alice.lane, other):
        for m in minutes:
            await _ended(pool, lane, "record", "done", m, 1.0, n=3)
    await pool.execute("VACUUM ANALYZE jobs")
    since = bucket_starts(DAY, datetime.now(timezone.utc))[0]
    before = {k: await _day_reads(pool, k, since) for k in (admin.key, alice.key)}
    for lane in (alice.lane, other):
        for m in minutes:
            await _ended(pool, lane, "record", "done", m, 2.0, n=2500)
    await pool.execute("DELETE FROM job_endings_by_minute")
    await pool.execute("DELETE FROM job_endings_by_half_hour")
    await pool.execute("UPDATE job_endings_rolled SET rolled_from = '-infinity', rolled_to = '-infinity'")
    await pool.execute("VACUUM ANALYZE jobs")
    await roll_up_endings(pool)
    assert await pool.fetchval("SELECT sum(jobs) FROM job_endings_by_minute WHERE lane IS NULL") == 2 * 12 * 2503
    for key in (admin.key, alice.key):
        after = await _day_reads(pool, key, since)
        for name, buffers in after.items():
            assert buffers < before[key][name] + 30, (name, before[key][name], buffers)
