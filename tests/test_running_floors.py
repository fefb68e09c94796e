"""The floor of running lock times (migrations 0054, 0060): the claim's look for expired
leases and the stuck sweep's start there, so neither walks the jobs that ran since a held
snapshot was taken; and no running job is ever below it, however long its claim took to
commit."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.queries import statement
from bench.explain import buffers_read, explain
from tests import factories as f


async def _fold(pool) -> None:
    await pool.execute("SELECT job_lanes_fold()")


async def _fold_with_work_of_the_type(pool, lane) -> None:
    """A fold with a line of type t to fold: a job of the type not due for an hour, in
    `lane`. The line has the fold take the type along and write its floor (a fold with no
    lines folds nothing)."""
    await pool.execute("INSERT INTO jobs (type, lane, run_after) VALUES ('t', $1, now() + interval '1 hour')", lane)
    await _fold(pool)


async def _fold_past(pool, since) -> None:
    """Folds a second apart, each with work of the type in a lane of its own, until the
    type's floor is past `since`. A fold moves the floor to no later than a second before
    the time noted for the oldest transaction still open, read from an earlier fold's note,
    so how many folds that takes depends on when the claims folded."""
    for _ in range(60):
        await asyncio.sleep(1.1)
        await _fold_with_work_of_the_type(pool, uuid.uuid4())
        if await pool.fetchval("SELECT job_running_floor('t') > $1", since):
            return
    raise AssertionError("the floor did not pass the jobs that ended within a minute")


@pytest.mark.parametrize("attempts_left", [True, False], ids=["reclaimed", "swept"])
async def test_a_claim_open_across_folds_keeps_its_job_above_the_floor(pool, dsn, attempts_left):
    """A claim written and left uncommitted while folds go by (a slow commit, a stalled
    statement): the folds cannot see its job, and must not raise the floor past its lock
    time. Once it commits and its lease expires, the job is taken back by another run (or,
    on its last attempt, found by the stuck sweep)."""
    lease = f.lease(seconds=1, max_attempts=3 if attempts_left else 1)
    await f.jobs(pool, "t", 1)
    later = await f.lane(pool, None)  # the lane of the work that has each fold take the type along
    await _fold(pool)  # the slow claim below finds no fold due: it folds nothing itself
    slow = await connect(dsn)
    try:
        tr = slow.transaction()
        await tr.start()
        [job] = await q.claim(slow, lease, await f.run(pool), 1)
        for _ in range(3):  # folds a second and more apart, the claim still open
            await asyncio.sleep(1.1)
            await _fold_with_work_of_the_type(pool, later)
        await tr.commit()
    finally:
        await slow.close()
    await asyncio.sleep(1.2)  # its lease has expired
    await _fold_with_work_of_the_type(pool, later)
    assert await pool.fetchval("SELECT job_running_floor('t') > '-infinity'"), "the type has a floor"
    if attempts_left:
        taken = await q.claim(pool, lease, await f.run(pool), 5)
        assert [j.id for j in taken] == [job.id]
    else:
        assert await q.stuck_candidates(pool, lease) == [job.id]


async def test_the_stuck_sweep_reads_as_much_after_ten_thousand_jobs_with_a_snapshot_held(pool, dsn):
    holder = await connect(dsn)
    try:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs")
        lease = f.lease(seconds=300)

        async def through(n: int) -> int:
            """n jobs claimed and done, folds past them, then the sweep's look: its buffers."""
            await f.jobs(pool, "t", n)
            run_id = await f.run(pool)
            while batch := await q.claim(pool, lease, run_id, 500):
                await q.complete(pool, run_id, [j.id for j in batch])
            await _fold_past(pool, await pool.fetchval("SELECT now()"))
            async with pool.acquire() as conn:
                sql, *args = statement("stuck_candidates").bind(type="t", lease_seconds=0.0, max_attempts=3)
                return buffers_read(await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, FORMAT JSON"))
        few = await through(100)
        many = await through(10_000)
        assert many <= 2 * few + 10, (few, many)
    finally:
        await holder.close()
