"""Cancelling running work: the request is noted on the job (POST /jobs/{id}/cancel, a
batch cancel), the run that holds the job notices within about 2 s (its cancel watch),
stops the handler (CancelledError: its `finally` runs) and ends the job `cancelled` with
the stage's `cancelled` hook, once, in the ending's transaction. A cancel no run will end
is the stuck sweep's. Real runs, a real server, the real API."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone


from app import Stage
from app.engine import batches as b
from app.engine.db import connect
from app.engine import jobs as q
from app.engine.migrate import chain
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import sweep_stuck
from app.pipeline.stage import Context, Tally
from app.settings import load_settings
from tests import factories as f
from tests.test_outcomes import client_for  # noqa: F401  (a fixture: the app on these stages, with an admin key)

HOOK_WRITE = "UPDATE jobs SET progress = coalesce(progress, 0) + 1 WHERE id = $1"
NOTICED_WITHIN = 3.0  # the watch looks once a second, the ending after it; room for a busy machine


def settings(database_url: str = "postgresql://unused", **kw):
    return load_settings(database_url=database_url, run_scheduler=False, **kw)


class Sleepy:
    """A stage whose handler waits until released (or for ever), recording what happens."""

    def __init__(self, type_: str = "t", *, batch_handler: bool = False) -> None:
        self.started: dict = {}      # job id -> asyncio.Event, set when its handler starts
        self.finally_ran: list = []
        self.returned: list = []
        self.cancelled: list = []    # (job id, the hook's ctx.run_id)
        self.release = asyncio.Event()
        handler = dict(batch_handler=self.handle_batch) if batch_handler else dict(handler=self.handle)
        self.stage = Stage(type=type_, lease=60, timeout=50, max_attempts=3, batch=5,
                           concurrency=5, cancelled=self.on_cancelled, **handler)

    def event(self, job_id) -> asyncio.Event:
        return self.started.setdefault(job_id, asyncio.Event())

    async def handle(self, job, ctx) -> None:
        self.event(job.id).set()
        try:
            await self.release.wait()
            self.returned.append(job.id)
        finally:
            self.finally_ran.append(job.id)

    async def handle_batch(self, jobs, ctx) -> None:
        for job in jobs:
            self.event(job.id).set()
        try:
            await self.release.wait()
            self.returned.extend(j.id for j in jobs)
        finally:
            self.finally_ran.extend(j.id for j in jobs)

    async def on_cancelled(self, job, ctx) -> None:
        assert ctx.db.is_in_transaction()  # the ending's own transaction
        self.cancelled.append((job.id, ctx.run_id))
        await ctx.db.execute(HOOK_WRITE, job.id)


async def status_within(pool, job_id, want: str, seconds: float) -> float:
    """Seconds until the job's status is `want`; fails after `seconds`."""
    started = time.monotonic()
    while (row := await f.job_row(pool, job_id))["status"] != want:
        assert time.monotonic() - started < seconds, f"job {job_id} still {row['status']}, not {want}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def start_run(pool, stage: Stage, budget: float = 30) -> asyncio.Task:
    return asyncio.create_task(Pipeline(pool, [stage], settings()).run("test", budget=budget))


async def test_a_running_job_cancelled_over_the_api_is_stopped_by_its_run(pool, client_for):
    sleepy = Sleepy()
    client = await client_for([sleepy.stage])
    [job_id] = await f.jobs(pool, "t", 1)
    run = start_run(pool, sleepy.stage)
    await asyncio.wait_for(sleepy.event(job_id).wait(), 10)

    r = await client.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 202, r.text  # asked: the run that holds it ends it
    assert r.json()["status"] == "running" and r.json()["cancelRequestedAt"] is not None
    assert (await client.post(f"/jobs/{job_id}/cancel")).status_code == 202  # asking again: the same

    took = await status_within(pool, job_id, "cancelled", NOTICED_WITHIN)
    result = await asyncio.wait_for(run, 10)
    assert took < NOTICED_WITHIN
    assert sleepy.finally_ran == [job_id] and sleepy.returned == []  # stopped where it awaited
    assert sleepy.cancelled == [(job_id, result.run_id)]  # the hook, once, with its run
    row = await f.job_row(pool, job_id)
    assert (row["status"], row["progress"], row["finished_at"] is not None) == ("cancelled", 1, True)
    # the run's summary counts it under `cancelled`: not done, not failed
    assert result.summary["cancelled"] == 1 and result.summary["stages"]["t"]["cancelled"] == 1
    assert (result.jobs_done, result.jobs_failed, result.jobs_retried) == (0, 0, 0)

    again = await client.post(f"/jobs/{job_id}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "job_finished", again.text
    # not a failure anywhere failures are listed
    assert (await client.get("/jobs?status=failed")).json()["data"] == []
    assert [j["id"] for j in (await client.get("/jobs?status=cancelled")).json()["data"]] == [str(job_id)]
    stats = (await client.get("/stats")).json()
    assert (stats["totals"]["failed"], stats["totals"]["cancelled"]) == (0, 1)
    assert stats["trouble"] == []
    # the person's request is in the audit log
    audit = (await client.get("/audit?table=jobs")).json()["data"]
    asked = [a for a in audit if a["op"] == "UPDATE" and a["rowId"] == str(job_id)
             and a["new"]["cancel_requested_at"] is not None and a["old"]["cancel_requested_at"] is None]
    assert len(asked) == 1 and asked[0]["actorKind"] == "admin"


async def test_two_overlapping_runs_the_cancel_reaches_the_one_that_holds_the_job(pool, client_for):
    sleepy = Sleepy()
    client = await client_for([sleepy.stage])
    [first] = await f.jobs(pool, "t", 1)
    # run A's claiming budget is spent a second in: it claims nothing after that (nor
    # prefetches), and runs what it holds to the end
    run_a = start_run(pool, sleepy.stage, budget=1.0)
    await asyncio.wait_for(sleepy.event(first).wait(), 10)
    await asyncio.sleep(1.0)
    [second] = await f.jobs(pool, "t", 1)  # so run B claims this one
    run_b = start_run(pool, sleepy.stage)
    await asyncio.wait_for(sleepy.event(second).wait(), 10)
    holders = {j: (await f.job_row(pool, j))["run_id"] for j in (first, second)}
    assert holders[first] != holders[second]

    assert (await client.post(f"/jobs/{second}/cancel")).status_code == 202
    await status_within(pool, second, "cancelled", NOTICED_WITHIN)
    await asyncio.sleep(1.2)  # a look of run A's watch too: it holds nothing asked for
    assert (await f.job_row(pool, first))["status"] == "running"
    sleepy.release.set()
    result_a, result_b = await asyncio.wait_for(asyncio.gather(run_a, run_b), 10)

    assert (result_a.run_id, result_b.run_id) == (holders[first], holders[second])
    assert (await f.job_row(pool, first))["status"] == "done"
    assert sleepy.returned == [first] and sorted(sleepy.finally_ran) == sorted([first, second])
    assert sleepy.cancelled == [(second, result_b.run_id)]
    assert (result_a.jobs_done, result_a.summary.get("cancelled")) == (1, None)
    assert (result_b.jobs_done, result_b.summary.get("cancelled")) == (0, 1)


async def test_a_batch_cancel_stops_a_batch_handler_whose_jobs_are_all_asked_for(pool, client_for):
    sleepy = Sleepy("bulk", batch_handler=True)
    client = await client_for([sleepy.stage])
    lane = await f.lane(pool, await f.user(pool))
    made = await b.create_batch(pool, lane, [b.BatchRequest("bulk")])
    [job_id] = made.created.values()
    run = start_run(pool, sleepy.stage)
    await asyncio.wait_for(sleepy.event(job_id).wait(), 10)

    r = await client.post(f"/batches/{made.batch_id}/cancel")
    assert r.status_code == 200 and (r.json()["jobsCancelled"], r.json()["jobsStopping"]) == (0, 1), r.text
    await status_within(pool, job_id, "cancelled", NOTICED_WITHIN)
    result = await asyncio.wait_for(run, 10)
    assert sleepy.finally_ran == [job_id] and sleepy.returned == []
    assert sleepy.cancelled == [(job_id, result.run_id)]
    batch = (await client.get(f"/batches/{made.batch_id}")).json()
    assert batch["status"] == "cancelled" and batch["counts"]["cancelled"] == 1


async def test_a_batch_handler_runs_on_for_the_jobs_not_asked_for(pool, client_for):
    """Stopping the call would lose the other jobs' work: it goes on, and the job asked for
    ends cancelled only if the handler did not finish it."""
    sleepy = Sleepy("bulk", batch_handler=True)
    client = await client_for([sleepy.stage])
    ids = await f.jobs(pool, "bulk", 2)
    run = start_run(pool, sleepy.stage)
    await asyncio.wait_for(asyncio.gather(*(sleepy.event(i).wait() for i in ids)), 10)
    assert (await client.post(f"/jobs/{ids[0]}/cancel")).status_code == 202
    await asyncio.sleep(NOTICED_WITHIN)
    assert {(await f.job_row(pool, i))["status"] for i in ids} == {"running"}
    assert sleepy.finally_ran == []  # not stopped
    sleepy.release.set()
    await asyncio.wait_for(run, 10)
    assert {(await f.job_row(pool, i))["status"] for i in ids} == {"done"}  # finished first: done stands
    assert sleepy.cancelled == []


async def test_a_batch_with_a_cancelled_job_ends_stopped(pool):
    lane = await f.lane(pool, await f.user(pool))
    made = await b.create_batch(pool, lane, [b.BatchRequest("a"), b.BatchRequest("b")])
    run_id = await f.run(pool)
    await q.claim(pool, f.lease("a"), run_id, 1)
    await pool.fetchrow("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = $1",
                        made.created["b"])
    assert await q.complete(pool, run_id, [made.created["a"]]) == [made.created["a"]]
    [changed] = await b.reconcile(pool)
    assert (changed["status"], changed["finished"]) == ("stopped", True)


async def test_the_stuck_sweep_cancels_what_no_run_will_end(pool):
    """A holder that died with a cancel asked for (attempts left or not), and a job that went
    back to pending before its holder saw the request: cancelled, each hook once, not
    retried nor given up."""
    sleepy = Sleepy()
    dead_last, dead_early, back = await f.jobs(pool, "t", 3)
    run_id = await f.run(pool)
    await q.claim(pool, sleepy.stage.lease_terms, run_id, 3)
    await pool.execute("UPDATE jobs SET attempts = 3 WHERE id = $1", dead_last)  # its last attempt
    for job_id in (dead_last, dead_early, back):
        await pool.execute("UPDATE jobs SET cancel_requested_at = now() WHERE id = $1", job_id)
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert await q.defer(pool, run_id, {back: later}) == [back]  # handed back before its run saw the request
    for job_id in (dead_last, dead_early):
        await f.age_lock(pool, job_id, 61)
    ctx = Context(db=pool, run_id=run_id, trigger="test", settings=settings(), deadline=0, tally=Tally())
    await asyncio.gather(*(sweep_stuck(pool, [sleepy.stage], ctx) for _ in range(3)))
    assert sorted(j for j, _ in sleepy.cancelled) == sorted([dead_last, dead_early, back])
    for job_id in (dead_last, dead_early, back):
        row = await f.job_row(pool, job_id)
        assert (row["status"], row["progress"]) == ("cancelled", 1)
    assert ctx.tally.cancelled == 3 and ctx.tally.failed == 0


async def test_retrying_a_cancelled_job_forgets_its_cancel(pool, client_for):
    sleepy = Sleepy()
    client = await client_for([sleepy.stage])
    [job_id] = await f.jobs(pool, "t", 1)
    assert (await client.post(f"/jobs/{job_id}/cancel")).json()["status"] == "cancelled"
    r = await client.post(f"/jobs/{job_id}/retry")
    assert r.status_code == 200 and r.json()["status"] == "pending", r.text
    assert (await f.job_row(pool, job_id))["cancel_requested_at"] is None
    sleepy.release.set()
    result = await Pipeline(pool, [sleepy.stage], settings()).run("test", budget=10)
    assert result.jobs_done == 1 and sleepy.cancelled == [(job_id, None)]  # the first cancel's hook only


async def test_migration_0042_moves_todays_cancels_to_their_own_status(new_database):
    """Cancels written before 0042 (failed, last_error 'cancelled', or 'cancelled with its
    batch') become cancelled, and their ended batch stopped; a real failure stays failed."""
    db = await connect(await new_database())
    try:
        steps = chain([])
        for version, sql in steps:
            if version >= "0042":
                break
            await db.execute(sql)
        await db.execute("INSERT INTO lanes (id) VALUES ('00000000-0000-0000-0000-000000000000') "
                         "ON CONFLICT DO NOTHING")
        batch = await db.fetchval("INSERT INTO batches (lane, status, finished_at) "
                                  "VALUES ('00000000-0000-0000-0000-000000000000', 'partially_failed', now()) "
                                  "RETURNING id")
        ids = {}
        for name, error, in_batch, status in [("one", "cancelled", False, "failed"),
                                              ("member", "cancelled with its batch", True, "failed"),
                                              ("sibling", None, True, "done"), ("boom", "boom", False, "failed")]:
            ids[name] = await db.fetchval(
                "INSERT INTO jobs (type, status, last_error, batch_id, finished_at) "
                "VALUES ('t', $1, $2, $3, now()) RETURNING id", status, error, batch if in_batch else None)
        for version, sql in steps:
            if version >= "0042":
                await db.execute(sql)
        statuses = {name: await db.fetchval("SELECT status FROM jobs WHERE id = $1", i) for name, i in ids.items()}
        assert statuses == {"one": "cancelled", "member": "cancelled", "sibling": "done", "boom": "failed"}
        assert await db.fetchval("SELECT status FROM batches WHERE id = $1", batch) == "stopped"
    finally:
        await db.close()
