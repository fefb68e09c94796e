"""Enqueue and dedupe; complete, fail, defer guarded by the holding run; the stuck sweep."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from app.engine import jobs as q
from app.engine.jobs import NewJob
from app.pipeline.maintenance import sweep_stuck
from app.pipeline.stage import Context, Stage, Tally
from tests import factories as f


async def test_concurrent_enqueues_of_one_key_leave_one_open_job(pool):
    async def enqueue_once():
        async with pool.acquire() as conn:
            return await q.enqueue(conn, NewJob(type="t", dedupe_key="same"))

    ids = await asyncio.gather(*(enqueue_once() for _ in range(20)))
    assert len([i for i in ids if i is not None]) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE dedupe_key = 'same'") == 1


async def test_a_key_is_free_again_once_its_job_is_finished(pool):
    first = await q.enqueue(pool, NewJob(type="t", dedupe_key="k"))
    run_id = await f.run(pool)
    await q.claim(pool, f.lease(), run_id, 1)
    assert await q.enqueue(pool, NewJob(type="t", dedupe_key="k")) is None  # running is open
    await q.complete(pool, run_id, [first])
    second = await q.enqueue(pool, NewJob(type="t", dedupe_key="k"))
    assert second is not None and second != first


async def test_bulk_enqueue_dedupes_within_the_call_and_against_open_jobs(pool):
    await q.enqueue(pool, NewJob(type="t", dedupe_key="a"))
    ids = await q.enqueue_many(pool, [NewJob(type="t", dedupe_key="a"), NewJob(type="t", dedupe_key="b"),
                                      NewJob(type="t", dedupe_key="b"), NewJob(type="t"), NewJob(type="t")])
    assert len(ids) == 3
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 4


async def test_plain_insert_from_any_client_is_claimable(pool):
    await pool.execute("INSERT INTO jobs (type, payload, dedupe_key) VALUES ('t', '{\"x\": 1}', 'p')")
    await pool.execute("INSERT INTO jobs (type, payload, dedupe_key) VALUES ('t', '{}', 'p') "
                       "ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING")
    [job] = await q.claim(pool, f.lease(), await f.run(pool), 5)
    assert job.payload == {"x": 1}


async def test_complete_applies_only_to_the_run_that_holds_the_job(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    lease = f.lease(seconds=60)
    old_run, new_run = await f.run(pool), await f.run(pool)
    await q.claim(pool, lease, old_run, 1)
    await f.age_lock(pool, job_id, 120)  # old run hung past its lease
    await q.claim(pool, lease, new_run, 1)
    assert await q.complete(pool, old_run, [job_id]) == []
    assert await q.fail(pool, old_run, job_id, "late", 3) is None
    assert await q.defer(pool, old_run, {job_id: await pool.fetchval("SELECT now()")}) == []
    row = await f.job_row(pool, job_id)
    assert row["status"] == "running" and row["run_id"] == new_run and row["last_error"] is None
    assert await q.complete(pool, new_run, [job_id]) == [job_id]


async def test_failure_backs_off_two_then_four_minutes_then_gives_up(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    run_id = await f.run(pool)
    lease = f.lease(max_attempts=3)
    waits = []
    for attempt in (1, 2):
        await q.claim(pool, lease, run_id, 1)
        row = await q.fail(pool, run_id, job_id, f"boom {attempt}", 3)
        assert row["status"] == "pending"
        waits.append(await pool.fetchval("SELECT run_after - now() FROM jobs WHERE id = $1", job_id))
        await pool.execute("UPDATE jobs SET run_after = now() WHERE id = $1", job_id)
    assert timedelta(minutes=1, seconds=59) < waits[0] <= timedelta(minutes=2)
    assert timedelta(minutes=3, seconds=59) < waits[1] <= timedelta(minutes=4)
    await q.claim(pool, lease, run_id, 1)
    row = await q.fail(pool, run_id, job_id, "boom 3", 3)
    assert row["status"] == "failed"
    stored = await f.job_row(pool, job_id)
    assert stored["last_error"] == "boom 3" and stored["finished_at"] is not None
    assert stored["attempts"] == 3


async def test_deferral_keeps_the_attempt(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    run_id = await f.run(pool)
    until = await pool.fetchval("SELECT now() + interval '1 day'")
    for _ in range(5):  # deferred over and over: never retired
        await pool.execute("UPDATE jobs SET run_after = now() WHERE id = $1", job_id)
        await q.claim(pool, f.lease(max_attempts=3), run_id, 1)
        assert await q.defer(pool, run_id, {job_id: until}) == [job_id]
    row = await f.job_row(pool, job_id)
    assert row["status"] == "pending" and row["attempts"] == 0 and row["run_after"] == until


async def _nothing(job, ctx):
    pass


def _ctx(pool, run_id):
    return Context(db=pool, run_id=run_id, trigger="test", settings=None, deadline=0, tally=Tally())


async def test_stuck_sweep_fails_once_and_calls_gave_up_once(pool):
    refunds = []

    async def refund(job, ctx):
        # runs inside the failing transaction: the refund and the failure commit together
        assert ctx.db.is_in_transaction()
        refunds.append(job.id)

    stage = Stage(type="t", handler=_nothing, lease=60, timeout=10, max_attempts=1, gave_up=refund)
    stuck = await f.jobs(pool, "t", 3)
    run_id = await f.run(pool)
    await q.claim(pool, stage.lease_terms, run_id, 3)
    for job_id in stuck[:2]:
        await f.age_lock(pool, job_id, 61)
    results = await asyncio.gather(*(sweep_stuck(pool, [stage], _ctx(pool, run_id)) for _ in range(4)))
    assert sum(results) == 2
    assert sorted(refunds) == sorted(stuck[:2])
    statuses = {r["id"]: r["status"] for r in await pool.fetch("SELECT id, status FROM jobs")}
    assert [statuses[i] for i in stuck] == ["failed", "failed", "running"]
    assert await sweep_stuck(pool, [stage], _ctx(pool, run_id)) == 0


async def test_a_failing_gave_up_hook_leaves_the_job_for_the_next_sweep(pool):
    calls = []

    async def flaky_refund(job, ctx):
        calls.append(job.id)
        await ctx.db.execute("UPDATE runs SET summary = summary")  # work that must roll back too
        if len(calls) == 1:
            raise RuntimeError("payments API down")

    stage = Stage(type="t", handler=_nothing, lease=60, timeout=10, max_attempts=1,
                  gave_up=flaky_refund)
    [job_id] = await f.jobs(pool, "t", 1)
    run_id = await f.run(pool)
    await q.claim(pool, stage.lease_terms, run_id, 1)
    await f.age_lock(pool, job_id, 61)
    ctx = _ctx(pool, run_id)
    assert await sweep_stuck(pool, [stage], ctx) == 0
    assert (await f.job_row(pool, job_id))["status"] == "running"
    assert "payments API down" in ctx.tally.errors[0]
    assert await sweep_stuck(pool, [stage], ctx) == 1
    assert (await f.job_row(pool, job_id))["status"] == "failed"
    assert calls == [job_id, job_id]


@pytest.mark.parametrize("bad", [dict(batch=0), dict(concurrency=0), dict(max_attempts=0),
                                 dict(timeout=0), dict(timeout=100, lease=50), dict(type="")])
def test_stage_rejects_settings_that_cannot_work(bad):
    with pytest.raises(ValueError):
        Stage(**{"type": "t", "handler": lambda j, c: None, **bad})
