"""How a job ends: every path (the loop, the stuck sweep, POST /jobs/{id}/cancel and
batch cancel) goes through app.pipeline.outcomes, which runs the stage's hook for the
endings that need one (gave_up, cancelled) exactly once, inside the ending's transaction,
with the job.failed notification; a hook that raises rolls its ending back."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app import Stage
from app.api import create_app
from app.engine import jobs as q
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import sweep_stuck
from app.pipeline.outcomes import error_text
from app.pipeline.stage import Context, Tally
from app.settings import load_settings
from tests import factories as f

HOOK_WRITE = "UPDATE jobs SET progress = coalesce(progress, 0) + 1 WHERE id = $1"


def settings(database_url: str = "postgresql://unused", **kw):
    # a secret and a URL: a job that gives up enqueues its job.failed notification
    return load_settings(database_url=database_url, webhook_secret="s" * 32,
                         webhook_url="http://127.0.0.1:9/hook", run_scheduler=False, **kw)


class Hooked:
    """A stage whose job always fails, and whose gave_up and cancelled hooks record each
    call, write to the job (progress + 1) and raise when told to."""

    def __init__(self, type_: str = "t") -> None:
        self.gave_up: list = []
        self.cancelled: list = []
        self.raising: set[str] = set()
        self.stage = Stage(type=type_, handler=self.handle, lease=60, timeout=10, max_attempts=1,
                           gave_up=self.on_gave_up, cancelled=self.on_cancelled)

    async def handle(self, job, ctx) -> None:
        raise RuntimeError("upstream said no")

    async def _hook(self, name: str, calls: list, job, ctx) -> None:
        assert ctx.db.is_in_transaction()  # the ending's own transaction
        calls.append(job.id)
        await ctx.db.execute(HOOK_WRITE, job.id)
        if name in self.raising:
            raise RuntimeError("refund service down")

    async def on_gave_up(self, job, ctx) -> None:
        await self._hook("gave_up", self.gave_up, job, ctx)

    async def on_cancelled(self, job, ctx) -> None:
        await self._hook("cancelled", self.cancelled, job, ctx)


async def failed_notices(pool, job_id) -> int:
    return await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'notify' AND payload->>'event' = "
                               "'job.failed' AND payload->'data'->>'jobId' = $1", str(job_id))


async def job_state(pool, job_id) -> tuple:
    row = await f.job_row(pool, job_id)
    return row["status"], row["progress"]


@pytest.fixture
async def client_for(dsn, admin_headers):
    """client_for(stages) -> an httpx client on the app with that stage list."""
    made = []

    async def make(stages: list[Stage]) -> httpx.AsyncClient:
        app = create_app(settings(dsn, cron_secret="c" * 32), stages)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                   headers=admin_headers)
        made.append((app, client))
        return client

    yield make
    for app, client in made:
        await client.aclose()
        await app.state.runtime.close()


async def test_the_loop_gives_up_through_gave_up_once_with_its_notice(pool):
    hooked = Hooked()
    [job_id] = await f.jobs(pool, "t", 1)
    result = await Pipeline(pool, [hooked.stage], settings()).run("cron")
    assert result.summary["stages"]["t"]["failed"] == 1
    assert hooked.gave_up == [job_id] and hooked.cancelled == []
    assert await job_state(pool, job_id) == ("failed", 1)  # the hook's write committed with it
    assert await failed_notices(pool, job_id) == 1
    await Pipeline(pool, [hooked.stage], settings()).run("cron")
    assert hooked.gave_up == [job_id]  # a finished job is never ended twice


async def test_the_stuck_sweep_gives_up_through_gave_up_once_with_its_notice(pool):
    hooked = Hooked()
    [job_id] = await f.jobs(pool, "t", 1)
    run_id = await f.run(pool)
    await q.claim(pool, hooked.stage.lease_terms, run_id, 1)
    await f.age_lock(pool, job_id, 61)
    ctx = Context(db=pool, run_id=run_id, trigger="test", settings=settings(), deadline=0, tally=Tally())
    swept = await asyncio.gather(*(sweep_stuck(pool, [hooked.stage], ctx) for _ in range(3)))
    assert sum(swept) == 1
    assert hooked.gave_up == [job_id] and hooked.cancelled == []
    assert await job_state(pool, job_id) == ("failed", 1)
    assert await failed_notices(pool, job_id) == 1


async def test_api_cancel_runs_the_cancelled_hook_once(pool, client_for):
    hooked = Hooked()
    client = await client_for([hooked.stage])
    [job_id] = await f.jobs(pool, "t", 1)
    r = await client.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["lastError"]) == ("cancelled", None)
    assert (await client.post(f"/jobs/{job_id}/cancel")).status_code == 409
    assert hooked.cancelled == [job_id] and hooked.gave_up == []
    assert await job_state(pool, job_id) == ("cancelled", 1)
    assert await failed_notices(pool, job_id) == 0  # a cancel is asked for: not announced as a failure


async def test_batch_cancel_runs_each_unstarted_jobs_cancelled_hook_once(pool, client_for):
    a, b = Hooked("a"), Hooked("b")
    client = await client_for([a.stage, b.stage])
    lane = await f.lane(pool, await f.user(pool))
    r = await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "a"}, {"type": "b"}]})
    assert r.status_code == 201, r.text
    batch_id, created = r.json()["batchId"], r.json()["created"]
    await q.claim(pool, a.stage.lease_terms, await f.run(pool), 1)  # a is running: its holder ends it
    r = await client.post(f"/batches/{batch_id}/cancel")
    assert r.status_code == 200 and (r.json()["jobsCancelled"], r.json()["jobsStopping"]) == (1, 1), r.text
    assert (await client.post(f"/batches/{batch_id}/cancel")).status_code == 409
    assert [str(i) for i in b.cancelled] == [created["b"]] and a.cancelled == []
    assert (await f.job_row(pool, created["a"]))["cancel_requested_at"] is not None
    assert a.gave_up == b.gave_up == []


async def test_a_raising_gave_up_rolls_back_the_loops_give_up_until_the_sweep(pool):
    hooked = Hooked()
    hooked.raising.add("gave_up")
    [job_id] = await f.jobs(pool, "t", 1)
    result = await Pipeline(pool, [hooked.stage], settings()).run("cron")
    assert hooked.gave_up == [job_id]
    # rolled back: still held (not failed), the hook's write and the notice undone
    assert await job_state(pool, job_id) == ("running", None)
    assert await failed_notices(pool, job_id) == 0
    assert any("refund service down" in e for e in result.summary["errors"])
    hooked.raising.clear()
    await f.age_lock(pool, job_id, 61)  # the lease runs out: the sweep gives it up
    ctx = Context(db=pool, run_id=result.run_id, trigger="test", settings=settings(), deadline=0,
                  tally=Tally())
    assert await sweep_stuck(pool, [hooked.stage], ctx) == 1
    assert hooked.gave_up == [job_id, job_id]
    assert await job_state(pool, job_id) == ("failed", 1)
    assert await failed_notices(pool, job_id) == 1


async def test_a_raising_cancelled_hook_rolls_back_the_api_cancel(pool, client_for):
    hooked = Hooked()
    hooked.raising.add("cancelled")
    client = await client_for([hooked.stage])
    [job_id] = await f.jobs(pool, "t", 1)
    r = await client.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["code"] == "hook_failed" and "cancelled hook" in error["message"]
    assert "refund service down" not in r.text  # the cause goes to the log, not the client
    assert await job_state(pool, job_id) == ("pending", None)
    hooked.raising.clear()
    assert (await client.post(f"/jobs/{job_id}/cancel")).status_code == 200
    assert hooked.cancelled == [job_id, job_id]
    assert await job_state(pool, job_id) == ("cancelled", 1)


async def test_a_raising_cancelled_hook_rolls_back_the_whole_batch_cancel(pool, client_for):
    a, b = Hooked("a"), Hooked("b")
    b.raising.add("cancelled")
    client = await client_for([a.stage, b.stage])
    lane = await f.lane(pool, await f.user(pool))
    r = await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "a"}, {"type": "b"}]})
    batch_id, created = r.json()["batchId"], r.json()["created"]
    r = await client.post(f"/batches/{batch_id}/cancel")
    assert r.status_code == 500 and r.json()["error"]["code"] == "hook_failed"
    assert b.cancelled  # it was called, and raised
    batch = (await client.get(f"/batches/{batch_id}")).json()
    assert batch["status"] == "pending"
    assert {c["status"] for c in batch["children"]} == {"pending"}
    assert {c["progress"] for c in batch["children"]} == {None}  # any hook that ran before b's is undone too
    b.raising.clear()
    assert (await client.post(f"/batches/{batch_id}/cancel")).status_code == 200
    assert {await job_state(pool, created[t]) for t in ("a", "b")} == {("cancelled", 1)}



async def test_an_error_holding_nul_or_a_lone_surrogate_still_fails_the_job(pool):
    """A handler's message often quotes an upstream answer. One NUL or lone surrogate in it
    made the failure unwritable: the job stayed `running` with no error, uncounted by the
    run, until its lease ran out (and again on every attempt). It fails, with the text
    PostgreSQL can store."""
    async def quoting(job, ctx) -> None:
        raise RuntimeError(f"upstream said: ok\x00then \udcff{job.payload['i']}")

    stage = Stage(type="quoting", handler=quoting, lease=60, timeout=10, max_attempts=1)
    [job_id] = await f.jobs(pool, "quoting", 1)
    result = await Pipeline(pool, [stage], settings()).run("cron")
    row = await f.job_row(pool, job_id)
    assert (row["status"], row["last_error"]) == ("failed", "RuntimeError: upstream said: okthen \ufffd0")
    assert result.summary["stages"]["quoting"]["failed"] == 1 and "errors" not in result.summary

    # a run that stops on an error writes it through the same function
    assert error_text(RuntimeError("the run broke on \x00 this")) == "RuntimeError: the run broke on  this"


async def test_a_hook_error_holding_nul_does_not_cost_the_run_its_row(pool):
    """A raising hook's error goes into runs.summary (jsonb). With a NUL in it the run's
    row could not be written: run() raised, the row stayed open until a later run closed it
    as abandoned, and its counts were lost."""
    hooked = Hooked()  # its handler always fails

    async def quoting_hook(job, ctx) -> None:
        raise RuntimeError("refund service said: a\x00b")

    stage = Stage(type="t", handler=hooked.handle, lease=60, timeout=10, max_attempts=1, gave_up=quoting_hook)
    [job_id] = await f.jobs(pool, "t", 1)
    result = await Pipeline(pool, [stage], settings()).run("cron")
    run = await pool.fetchrow("SELECT stop_reason, finished_at, summary FROM runs WHERE id = $1", result.run_id)
    assert run["stop_reason"] == "no_work" and run["finished_at"] is not None
    assert any("refund service said: ab" in e for e in run["summary"]["errors"])
    assert await job_state(pool, job_id) == ("running", None)  # the hook failed: held until the sweep
