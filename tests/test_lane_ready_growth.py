"""When a lane's head job is not ready (a retry waiting out its backoff, a job due later) or
no job is left from the head on, the fold reads when the lane next has ready work from what
is live or ahead (job_lane_next_ready, migration 0062), not from the lane's first entry in
jobs_wake_idx: with a snapshot held, that entry is the first job the lane had since."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.job_admin import cancel_job
from app.engine.jobs import NewJob
from bench.explain import buffers_read, explain
from tests import factories as f

BUFFERS = "ANALYZE, BUFFERS, FORMAT JSON"


async def _fold(pool) -> None:
    await asyncio.sleep(1.1)
    await pool.execute("SELECT job_lanes_fold()")


async def _fold_buffers(pool) -> int:
    """One fold, rolled back: the buffers it and every statement inside it read."""
    async with pool.acquire() as conn:
        return buffers_read(await explain(conn, "SELECT job_lanes_fold()", (), options=BUFFERS))


async def test_a_fold_reads_as_much_for_a_lane_whose_head_waits_after_ten_thousand_jobs(pool, dsn):
    holder = await connect(dsn)
    try:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs")
        lease = f.lease(seconds=300)

        async def drain(n: int) -> None:
            await q.enqueue_many(pool, [NewJob(type="t") for _ in range(n)])
            run_id = await f.run(pool)
            while batch := await q.claim(pool, lease, run_id, 500):
                await q.complete(pool, run_id, [j.id for j in batch])
            await _fold(pool)
            await _fold(pool)

        async def through(n: int) -> int:
            """n jobs of the lane claimed and done, then the same 100 (the fold's look for the
            oldest running job passes those claimed in the second before its floor); then a
            job due in an hour is the lane's head, and a fold's buffers are measured."""
            await drain(n)
            await drain(100)
            later = datetime.now(timezone.utc) + timedelta(hours=1)
            head = await q.enqueue(pool, NewJob(type="t", run_after=later))
            await _fold(pool)
            row = await pool.fetchrow("SELECT pending, ready_at FROM job_lanes WHERE type = 't' "
                                      "ORDER BY epoch DESC LIMIT 1")
            assert row["pending"] == 1 and abs((row["ready_at"] - later).total_seconds()) < 0.01
            await q.enqueue(pool, NewJob(type="other"))  # a line: a fold with none returns at once
            buffers = await _fold_buffers(pool)
            await cancel_job(pool, head)
            return buffers

        few = await through(100)
        many = await through(10_000)
        assert many <= 2 * few + 20, (few, many)
    finally:
        await holder.close()
