"""What the hot path reads per call must not grow with the work done while a snapshot is
held open (a report, a pg_dump): measured per statement with pg_stat_statements, through
the real pipeline, after 100 jobs and after 10,000 (docs/shared-database.md)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from app import Stage
from app.engine.db import create_pool
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests.own_server import migrated_server, pg_ctl

SMALL, LARGE = 100, 10_000
WINDOW = 500          # jobs pushed through while a statement's buffers are counted
FLAT = 2.0            # after LARGE, at most this many times the buffers per call after SMALL

async def noop(job, ctx):
    pass


async def push(pool, pipeline: Pipeline, lanes: list, n: int) -> None:
    await pool.execute(
        "INSERT INTO jobs (type, lane) "
        "SELECT 'horizon', ($1::uuid[])[1 + g % cardinality($1::uuid[])] FROM generate_series(1, $2) g",
        lanes, n)
    result = await pipeline.run("test", budget=120)
    assert result.stop_reason == "no_work"


async def settle(pool, pipeline: Pipeline, lanes: list) -> None:
    """The same few seconds before each window: the fold's look for running jobs passes the
    jobs claimed in the two seconds before its last floor (job_running_floors), so a window
    right after a burst would pay for the burst, not for the horizon."""
    await asyncio.sleep(2.5)
    await push(pool, pipeline, lanes, SMALL)


async def per_call(pool) -> dict[int, tuple[float, int, str]]:
    """Buffers per call, calls and text of each statement, by its query id: the text a
    statement is first seen with differs (constants replaced or not) with how it was prepared."""
    rows = await pool.fetch(
        "SELECT queryid, regexp_replace(query, '\\s+', ' ', 'g') AS q, calls, "
        "shared_blks_hit + shared_blks_read AS b "
        "FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0 "
        "AND query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE 'INSERT INTO jobs (type, lane) SELECT%'")
    return {r["queryid"]: (r["b"] / r["calls"], r["calls"], r["q"]) for r in rows}


@pytest.fixture(scope="module")
async def server():
    async with migrated_server("skiplock-horizon-", []) as (srv, dsn, port):
        admin = await asyncpg.connect(dsn)
        await admin.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        await admin.close()
        await asyncio.to_thread(pg_ctl, srv, "restart")
        admin = await asyncpg.connect(dsn)
        await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await admin.close()
        yield dsn


@pytest.mark.parametrize("lane_count", [1, 100])
async def test_hot_statements_read_no_more_after_ten_thousand_jobs(server, lane_count):
    pool = await create_pool(server)
    pin = await asyncpg.connect(server)
    try:
        await pool.execute("TRUNCATE jobs, job_lanes, job_lane_journal, job_lane_hours, settled_backlog, runs CASCADE")
        lanes = [r[0] for r in await pool.fetch(
            "INSERT INTO lanes (id) SELECT gen_random_uuid() FROM generate_series(1, $1) RETURNING id", lane_count)]
        # a lease of seconds: the look for expired leases then reaches back past the jobs
        # that ran since the snapshot was taken, as a 15-minute lease does in a long report
        pipeline = Pipeline(pool, [Stage(type="horizon", handler=noop, batch=50, concurrency=10,
                                         lease=3, timeout=2)],
                            # no maintenance ticks: their enqueue happens only when a period ends
                            load_settings(pipeline_plugins="", run_scheduler=False))
        # a report's snapshot, taken before any job exists and held to the end
        held = pin.transaction(isolation="repeatable_read")
        await held.start()
        await pin.fetchval("SELECT count(*) FROM jobs")

        await push(pool, pipeline, lanes, SMALL)
        await settle(pool, pipeline, lanes)
        # before each window, the statistics autovacuum would keep: a plan made for a table
        # of a few rows reads it whole (a sequential scan for ids), which grows with the
        # table, not with the horizon
        await pool.execute("ANALYZE jobs")
        await pool.execute("SELECT pg_stat_statements_reset()")
        await push(pool, pipeline, lanes, WINDOW)
        early = await per_call(pool)

        await push(pool, pipeline, lanes, LARGE - 2 * SMALL - WINDOW)
        await settle(pool, pipeline, lanes)
        await pool.execute("ANALYZE jobs")
        await pool.execute("SELECT pg_stat_statements_reset()")
        await push(pool, pipeline, lanes, WINDOW)
        late = await per_call(pool)
        await held.rollback()
    finally:
        await pin.close()
        await pool.close()

    both = early.keys() & late.keys()
    # the claim, the batch's ending and the run's end are all measured
    assert any(early[q][2].startswith("WITH done AS") for q in both)
    growing = {q: (early[q][0], late[q][0]) for q in both if late[q][0] > FLAT * max(early[q][0], 10)}
    assert not growing, "statements that read more after 10,000 jobs (buffers per call, early -> late):\n" + \
        "\n".join(f"  {e:8.0f} -> {l:8.0f}  {late[q][2][:100]}" for q, (e, l) in growing.items())
