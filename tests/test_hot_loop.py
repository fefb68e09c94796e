"""The hot loop's one round trip per batch: a batch's endings written in the statement
that claims the next, and the next batch claimed while this one runs (handed back at
once when the run will not reach it)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import asyncpg
import pytest

from app.engine import jobs as q
from app.engine.db import connect, create_pool
from app.engine.one_connection import OneConnection
from app.pipeline import outcomes
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Context, Stage, StopRun, Tally
from app.settings import load_settings
from tests import factories as f


async def test_one_statement_writes_endings_and_claims_the_next_batch(pool):
    ids = await f.jobs(pool, "t", 8)
    mine, other = await f.run(pool), await f.run(pool)
    a, b, c = [j.id for j in await q.claim(pool, f.lease(), mine, 3)]
    [theirs] = [j.id for j in await q.claim(pool, f.lease(), other, 1)]
    await f.age_lock(pool, a, 3600)  # past its lease: the claim must not take it back mid-write

    w = await q.finish_and_claim(pool, f.lease(), mine, 3, [a, b, theirs],
                                 {c: datetime.now(timezone.utc)})

    # only what this run held is written; the claim saw the queue as it was before
    assert (w.done, w.handed_back) == (2, 1)
    assert {j.id for j in w.claimed} == set(ids[4:7]) and {j.run_id for j in w.claimed} == {mine}
    rows = {r["id"]: r for r in await pool.fetch("SELECT id, status, attempts, run_id FROM jobs")}
    assert [rows[i]["status"] for i in (a, b, c, theirs)] == ["done", "done", "pending", "running"]
    assert rows[a]["attempts"] == 1 and rows[c]["attempts"] == 0 and rows[theirs]["run_id"] == other
    # the lane's counters agree with the rows: 7 attempts started, c's handed back
    [(pending, served)] = (await f.lane_counts(pool, "t")).values()
    assert (pending, served) == (2, 6)

    nothing = await q.finish_and_claim(pool, f.lease(), mine, 0, [j.id for j in w.claimed])
    assert (nothing.done, nothing.handed_back, nothing.claimed) == (3, 0, [])


@pytest.mark.parametrize("streams", [1, 2])
async def test_a_prefetched_batch_the_run_stops_before_is_handed_back(pool, streams):
    await pool.execute("UPDATE runs SET finished_at = now() WHERE finished_at IS NULL")  # alone
    ids = await f.jobs(pool, "t", 30)
    started = []

    async def quota_out(job, ctx):
        started.append(job.id)
        # until the claims ahead have landed (the batch claimed while this one runs, and the
        # second stream's first), counted in the database: a fixed sleep was too short once
        # on a loaded box. If they never land, the count below says so after 10 s.
        deadline = asyncio.get_running_loop().time() + 10
        while (await pool.fetchval("SELECT count(*) FROM jobs WHERE run_id = $1 AND status = 'running'",
                                   ctx.run_id) < 10 + 10 * streams
               and asyncio.get_running_loop().time() < deadline):
            await asyncio.sleep(0.01)
        raise StopRun("quota_exhausted")

    stage = Stage(type="t", handler=quota_out, batch=10, concurrency=1)
    settings = load_settings(database_url="postgresql://unused", pipeline_claim_streams=streams)
    result = await Pipeline(pool, [stage], settings).run("manual")

    # one handler ran: the stop reached the other stream before its batch could start
    assert result.stop_reason == "quota_exhausted" and len(started) == 1
    rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM jobs WHERE type = 't'")}
    assert {r["status"] for r in rows.values()} == {"pending"}
    assert {r["attempts"] for r in rows.values()} == {0}  # every attempt handed back
    # the first batch (10) and the one claimed while it ran (10) were this run's; with two
    # streams, also the second stream's first batch (the first was full: a backlog)
    assert sum(1 for i in ids if rows[i]["run_id"] == result.run_id) == 10 + 10 * streams
    # With two streams, the second's next claim may already be on its way when the first
    # stops: landing after the first stream's hand-back, it takes 10 of those jobs again,
    # and they are handed back again (counted twice, never run: one handler ran, attempts 0)
    handed_back = {10 + 10 * streams} | ({10 + 10 * streams + 10} if streams == 2 else set())
    assert result.jobs_deferred in handed_back and result.jobs_done == 0
    [(pending, served)] = (await f.lane_counts(pool, "t")).values()
    assert (pending, served) == (30, 0)


async def test_two_claim_streams_drain_a_backlog_once_on_two_connections(dsn):
    """With a backlog the second stream claims beside the first: every job runs once,
    handlers stay within the stage's concurrency (one batch at a time across streams),
    and the run keeps to two connections. One stream alone takes no second batch."""
    for streams in (2, 1):
        pool = await create_pool(dsn, size=10)
        try:
            await pool.execute("DELETE FROM jobs WHERE type = 'two'")
            await pool.execute("UPDATE runs SET finished_at = now() WHERE finished_at IS NULL")  # alone
            ids = await f.jobs(pool, "two", 300)
            seen: list = []
            running = [0, 0]  # now, most at once

            async def work(job, ctx):
                running[0] += 1
                running[1] = max(running[1], running[0])
                seen.append(job.id)
                await asyncio.sleep(0.001)
                running[0] -= 1

            stage = Stage(type="two", handler=work, batch=10, concurrency=5)
            settings = load_settings(database_url="postgresql://unused", pipeline_claim_streams=streams)
            result = await Pipeline(pool, [stage], settings).run("manual")

            assert result.stop_reason == "no_work" and result.jobs_done == 300
            assert sorted(seen) == sorted(ids)  # each once
            rows = await pool.fetch("SELECT status, attempts FROM jobs WHERE type = 'two'")
            assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}
            assert running[1] <= 5
            assert pool.get_size() <= 2
            second = result.summary.get("secondStreamBatches", 0)
            assert (second > 0) if streams == 2 else (second == 0), result.summary
        finally:
            await pool.close()


async def test_a_run_that_is_not_alone_keeps_to_one_stream(pool):
    """Another run open and beating: no second stream (overlapping runs already keep the
    server busy); the same backlog alone gets one."""
    await pool.execute("UPDATE runs SET finished_at = now() WHERE finished_at IS NULL")

    async def busy(job, ctx):
        await asyncio.sleep(0)

    stage = Stage(type="busy", handler=busy, batch=10, concurrency=5)
    settings = load_settings(database_url="postgresql://unused", pipeline_claim_streams=2)
    for other_open in (True, False):
        await f.jobs(pool, "busy", 200)
        other = await f.run(pool) if other_open else None
        result = await Pipeline(pool, [stage], settings).run("manual")
        assert result.jobs_done == 200
        second = result.summary.get("secondStreamBatches", 0)
        assert (second == 0) if other_open else (second > 0), result.summary
        if other is not None:
            await pool.execute("UPDATE runs SET finished_at = now() WHERE id = $1", other)


async def test_a_run_never_takes_back_its_own_expired_lease(pool):
    """A batch of a run that waited past its lease (prefetched, or held by its other claim
    stream) is still the run's to run: its own claims skip it, another run's take it."""
    await f.jobs(pool, "own", 2)
    mine, other = await f.run(pool), await f.run(pool)
    [held] = [j.id for j in await q.claim(pool, f.lease("own"), mine, 1)]
    await f.age_lock(pool, held, 3600)
    again = [j.id for j in await q.claim(pool, f.lease("own"), mine, 2)]
    assert held not in again and len(again) == 1  # the other, ready job
    assert [j.id for j in await q.claim(pool, f.lease("own"), other, 2)] == [held]


async def _waiting(pool, pid: int, task: asyncio.Task) -> None:
    """Until backend `pid` waits for a lock (the task must still be going)."""
    while not await pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid):
        assert not task.done(), task
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("callers_transaction", [False, True])
async def test_a_claim_cut_to_break_a_deadlock_is_sent_again(dsn, pool, callers_transaction):
    """The server breaks a deadlock by cutting one statement; when that is a run's claim,
    the run must not end in error with its batch held until the lease runs out. Here a
    second transaction locks the larger of a run's two finished jobs, waits until the
    claim has marked the smaller one done and is waiting for the larger, then asks for
    the smaller: a cycle, and the claim (waiting longer) is cut. Sent again, it waits
    for the other transaction to end and then writes both endings. Inside a caller's
    transaction it is not sent again: that transaction is lost, and the caller is told."""
    ids = await f.jobs(pool, "dl", 3)
    mine = await f.run(pool)
    held = sorted(j.id for j in await q.claim(pool, f.lease("dl"), mine, 2))
    claimer, other = await connect(dsn), await connect(dsn)
    try:
        claimer_pid = claimer.get_server_pid()
        tx = other.transaction()
        await tx.start()
        await other.execute("SET LOCAL deadlock_timeout = '30s'")  # so the claim's check finds the cycle
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", held[1])
        if callers_transaction:
            await claimer.execute("BEGIN")
        claiming = asyncio.create_task(q.finish_and_claim(claimer, f.lease("dl"), mine, 1, held))
        await _waiting(pool, claimer_pid, claiming)
        # the claim holds the smaller job's row now; asking for it closes the cycle
        asked = asyncio.create_task(other.execute(
            "UPDATE jobs SET locked_at = locked_at WHERE id = $1", held[0]))
        await asyncio.wait_for(asked, 10)  # the claim was cut: its row is free
        await tx.rollback()
        if callers_transaction:
            with pytest.raises(asyncpg.DeadlockDetectedError):
                await asyncio.wait_for(claiming, 10)
            await claimer.execute("ROLLBACK")
            w = await q.finish_and_claim(claimer, f.lease("dl"), mine, 1, held)  # the caller's retry
        else:
            w = await asyncio.wait_for(claiming, 10)
    finally:
        await claimer.close()
        await other.close()
    assert (w.done, [j.id for j in w.claimed]) == (2, [ids[2]])
    rows = await pool.fetch("SELECT id, status, attempts FROM jobs WHERE type = 'dl' ORDER BY id")
    assert [(r["status"], r["attempts"]) for r in rows] == [("done", 1), ("done", 1), ("running", 1)]


async def test_a_failure_cut_to_break_a_deadlock_is_written_again(dsn, pool, caplog):
    """A failed attempt's write (its own transaction, gave_up included) cut by the server
    to break a deadlock is run again, not left in the run's errors with the job held until
    its lease runs out. Here a second transaction holds the lane's counter row, which the
    failure (its job pending again) must write, and once the failure waits for it, asks
    for the job's row: a cycle, and the failure (waiting longer) is cut."""
    async def nothing(job, ctx):
        pass

    stage = Stage(type="dlf", handler=nothing, lease=60, timeout=10, max_attempts=3)
    [job_id] = await f.jobs(pool, "dlf", 1)
    mine = await f.run(pool)
    [job] = await q.claim(pool, stage.lease_terms, mine, 1)
    # folded: the lane has nothing waiting, so the job made pending again writes its row
    await pool.execute("SELECT job_lanes_fold()")
    failer, other = await connect(dsn), await connect(dsn)
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute("SET LOCAL deadlock_timeout = '30s'")  # so the failure's check finds the cycle
        await other.execute("SELECT 1 FROM job_lanes WHERE type = 'dlf' FOR UPDATE")
        ctx = Context(db=pool, run_id=mine, trigger="test", settings=None, deadline=0, tally=Tally())
        failing = asyncio.create_task(outcomes.fail(OneConnection(failer), stage, job, "boom", ctx))
        await _waiting(pool, failer.get_server_pid(), failing)
        asked = asyncio.create_task(other.execute(
            "UPDATE jobs SET locked_at = locked_at WHERE id = $1", job_id))
        await asyncio.wait_for(asked, 10)  # the failure was cut: the job's row is free
        await tx.rollback()
        gave_up = await asyncio.wait_for(failing, 10)
    finally:
        await failer.close()
        await other.close()
    assert gave_up is False  # written, with attempts left: back to pending
    row = await f.job_row(pool, job_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("pending", 1, "boom")
    assert any("deadlock" in r.getMessage() and r.name == "skiplock.db" for r in caplog.records)


async def test_no_before_update_row_trigger_on_jobs(pool):
    """With any, PostgreSQL fetches and locks the old row of every claimed and ended job
    before it tests the trigger's WHEN (migration 0053)."""
    before_update = await pool.fetch(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND NOT tgisinternal "
        "AND tgtype & 1 = 1 AND tgtype & 2 = 2 AND tgtype & 16 = 16")  # row, before, update
    assert [r["tgname"] for r in before_update] == []
