"""What the hot path reads per call must not grow with the work done while a snapshot is
held open (a report, a pg_dump): measured per statement with pg_stat_statements, through
the real pipeline, after 100 jobs and after 10,000 (docs/queue.md#a-shared-database).

The statements that still grow are named in STILL_GROWING, so the list can only shrink:
a statement that starts growing fails the test, and so does one on the list that has
become flat (take it off)."""

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

# The first words of each statement that still grows, and why (docs/queue.md#a-shared-database):
STILL_GROWING = {
    # every claim rewrites its lanes' job_lanes rows (served, pending, head), so the
    # rows' versions pile up behind the snapshot and each claim walks them all
    "WITH done AS ( UPDATE jobs",
    # a run's end folds what the lane journal holds: it reads the journal and the settled
    # backlog from their marks, but locks and rewrites the job_lanes (and job_lane_hours)
    # rows of the lanes with lines, whose versions pile up as the claim's do
    "UPDATE runs SET stop_reason",
}


async def noop(job, ctx):
    pass


async def push(pool, pipeline: Pipeline, lanes: list, n: int) -> None:
    await pool.execute(
        "INSERT INTO jobs (type, lane) "
        "SELECT 'horizon', ($1::uuid[])[1 + g % cardinality($1::uuid[])] FROM generate_series(1, $2) g",
        lanes, n)
    result = await pipeline.run("test", budget=120)
    assert result.stop_reason == "no_work"


async def per_call(pool) -> dict[str, float]:
    rows = await pool.fetch(
        "SELECT regexp_replace(query, '\\s+', ' ', 'g') AS q, calls, shared_blks_hit + shared_blks_read AS b "
        "FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0 "
        "AND query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE 'INSERT INTO jobs (type, lane) SELECT%'")
    return {r["q"]: (r["b"] / r["calls"], r["calls"]) for r in rows}


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
        pipeline = Pipeline(pool, [Stage(type="horizon", handler=noop, batch=50, concurrency=10)],
                            # no maintenance ticks: their enqueue happens only when a period ends
                            load_settings(pipeline_plugins="", run_scheduler=False))
        # a report's snapshot, taken before any job exists and held to the end
        held = pin.transaction(isolation="repeatable_read")
        await held.start()
        await pin.fetchval("SELECT count(*) FROM jobs")

        await push(pool, pipeline, lanes, SMALL)
        await pool.execute("SELECT pg_stat_statements_reset()")
        await push(pool, pipeline, lanes, WINDOW)
        early = await per_call(pool)

        await push(pool, pipeline, lanes, LARGE - SMALL - WINDOW)
        await pool.execute("SELECT pg_stat_statements_reset()")
        await push(pool, pipeline, lanes, WINDOW)
        late = await per_call(pool)
        await held.rollback()
    finally:
        await pin.close()
        await pool.close()

    both = early.keys() & late.keys()
    growing = {q: (early[q][0], late[q][0]) for q in both if late[q][0] > FLAT * max(early[q][0], 10)}
    known = {q for q in growing if any(q.startswith(s) for s in STILL_GROWING)}
    new = {q: b for q, b in growing.items() if q not in known}
    assert not new, "statements that read more after 10,000 jobs (buffers per call, early -> late):\n" + \
        "\n".join(f"  {e:8.0f} -> {l:8.0f}  {q[:100]}" for q, (e, l) in new.items())
    # a listed statement of the hot loop (run per batch, so measured over many calls) that is
    # clearly flat now, in the many-lane case where it grew, is taken off the list
    per_batch = [q for q in both if min(early[q][1], late[q][1]) >= 5]
    flat_now = [s for s in STILL_GROWING if lane_count > 1
                and any(q.startswith(s) for q in per_batch)
                and all(late[q][0] <= 1.2 * max(early[q][0], 10) for q in per_batch if q.startswith(s))]
    assert not flat_now, f"flat now, take them off STILL_GROWING: {flat_now}"
