"""Jobs that wait for other jobs (migration 0046, app/engine/dependencies.py): a waiting job
is claimed only once every parent is done; a parent that does not succeed cancels its
dependents (through chains) or releases those that run anyway; unknown parents and a job
naming itself are refused; a parent ending while children are enqueued leaves none stuck;
a handler's result is kept and read by its dependents; a batch's callback is enqueued once."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app import Stage
from app.engine import batches as b
from app.engine.batches import BatchRequest
from app.engine.dependencies import ParentRefused, enqueue_after
from app.engine.accounts import authenticate
from app.engine.jobs import NewJob, enqueue
from app.engine.tenancy import tenant_transaction
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f

SETTINGS = load_settings(database_url="postgresql://unused", run_scheduler=False)


class Recorder:
    """A stage whose handler notes the order jobs ran in and returns its payload's `value`
    (raising when the payload says `fail`); its jobs fail for good on their first attempt."""

    def __init__(self, type_: str = "t") -> None:
        self.ran: list[str] = []
        self.parents_seen: dict[str, dict] = {}
        self.stage = Stage(type=type_, handler=self.handle, lease=60, timeout=10, max_attempts=1)

    async def handle(self, job, ctx):
        self.ran.append(job.payload["name"])
        self.parents_seen[job.payload["name"]] = await ctx.parent_results()
        if job.payload.get("fail"):
            raise RuntimeError("told to fail")
        return job.payload.get("value")


def job(name: str, type_: str = "t", **payload) -> NewJob:
    return NewJob(type=type_, payload={"name": name, **payload})


async def status(pool, job_id) -> str:
    return await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id)


async def pending_counted(pool, type_: str) -> int:
    """Pending jobs of a type as the lane counters (and the journal) have them."""
    return await pool.fetchval("SELECT coalesce(sum(pending), 0) FROM job_lane_counts WHERE type = $1", type_)


async def run(pool, *stages) -> dict:
    return await Pipeline(pool, list(stages), SETTINGS).run("manual")


async def test_a_chain_runs_in_order_through_real_runs(pool):
    r = Recorder()
    a = await enqueue(pool, job("a", value={"n": 1}))
    b_ = await enqueue_after(pool, job("b", value=[2]), [a])
    c = await enqueue_after(pool, job("c"), [b_])
    assert [await status(pool, i) for i in (a, b_, c)] == ["pending", "waiting", "waiting"]
    assert await pending_counted(pool, "t") == 1  # waiting jobs are not pending work
    for _ in range(3):
        await run(pool, r.stage)
    assert r.ran == ["a", "b", "c"]
    assert [await status(pool, i) for i in (a, b_, c)] == ["done"] * 3
    assert r.parents_seen["b"] == {a: {"n": 1}} and r.parents_seen["c"] == {b_: [2]}
    assert await pending_counted(pool, "t") == sum((await f.true_pending(pool, "t")).values())


async def test_a_fan_in_waits_for_both_parents(pool):
    r = Recorder()
    a = await enqueue(pool, job("a", type_="first"))
    b_ = await enqueue(pool, job("b", type_="second"))
    c = await enqueue_after(pool, job("c", type_="third"), [a, b_])
    first = Recorder("first")
    await run(pool, first.stage, r.stage)  # only a's stage runs: b still open
    assert await status(pool, c) == "waiting"
    assert await pool.fetchval("SELECT parents_left FROM jobs WHERE id = $1", c) == 1
    second, third = Recorder("second"), Recorder("third")
    await run(pool, second.stage, third.stage)  # b ends, which releases c, claimed in the same run
    assert second.ran == ["b"] and third.ran == ["c"] and await status(pool, c) == "done"


async def test_two_parents_ending_at_once_release_the_child(pool):
    a, b_ = await enqueue(pool, job("a")), await enqueue(pool, job("b"))
    c = await enqueue_after(pool, job("c"), [a, b_])
    await pool.execute("UPDATE jobs SET status = 'running' WHERE id = ANY($1)", [a, b_])
    async with pool.acquire() as one, pool.acquire() as two:
        t1, t2 = one.transaction(), two.transaction()
        await t1.start()
        await t2.start()
        await one.execute("UPDATE jobs SET status = 'done' WHERE id = $1", a)  # holds c's row
        second = asyncio.create_task(two.execute("UPDATE jobs SET status = 'done' WHERE id = $1", b_))
        await asyncio.sleep(0.2)
        assert not second.done()  # waits for c's row, then counts on the row a's ending wrote
        await t1.commit()
        await second
        await t2.commit()
    assert await status(pool, c) == "pending"


async def test_a_failing_parent_cancels_its_chain_and_run_anyway_releases(pool):
    r = Recorder()
    a = await enqueue(pool, job("a", fail=True))
    b_ = await enqueue_after(pool, job("b"), [a])
    c = await enqueue_after(pool, job("c"), [b_])
    anyway = await enqueue_after(pool, job("anyway"), [a], run_anyway=True)
    await run(pool, r.stage)
    assert await status(pool, a) == "failed"
    assert [await status(pool, i) for i in (b_, c)] == ["cancelled", "cancelled"]
    assert await pool.fetchval("SELECT last_error FROM jobs WHERE id = $1", b_) == f"job {a} it waited for ended failed"
    assert await pool.fetchval("SELECT last_error FROM jobs WHERE id = $1", c) == f"job {b_} it waited for ended cancelled"
    await run(pool, r.stage)
    assert r.ran == ["a", "anyway"] and await status(pool, anyway) == "done"
    assert r.parents_seen["anyway"] == {a: None}


async def test_a_parent_ended_before_the_child_counts_at_once(pool):
    done, failed = await enqueue(pool, job("done")), await enqueue(pool, job("failed"))
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1", done)
    await pool.execute("UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = $1", failed)
    assert await status(pool, await enqueue_after(pool, job("x"), [done])) == "pending"
    assert await status(pool, await enqueue_after(pool, job("y"), [done, failed])) == "cancelled"
    assert await status(pool, await enqueue_after(pool, job("z"), [failed], run_anyway=True)) == "pending"


async def test_unknown_parents_itself_and_rewired_parents_are_refused(pool):
    a = await enqueue(pool, job("a"))
    with pytest.raises(ParentRefused) as unknown:
        await enqueue_after(pool, job("b"), [a, uuid.uuid4()])
    assert unknown.value.why == "unknown"
    me = uuid.uuid4()
    with pytest.raises(Exception) as itself:
        await pool.execute("INSERT INTO jobs (id, type, parents) VALUES ($1, 't', ARRAY[$1]::uuid[])", me)
    assert "cannot wait for itself" in str(itself.value)
    b_ = await enqueue_after(pool, job("b"), [a])
    # a cycle would need a job to wait for one that waits on it: parents never change
    with pytest.raises(Exception) as rewired:
        await pool.execute("UPDATE jobs SET parents = ARRAY[$2]::uuid[] WHERE id = $1", a, b_)
    assert "fixed when it is enqueued" in str(rewired.value)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2


async def test_plain_sql_waits_too(pool):
    a = await enqueue(pool, job("a"))
    c = await pool.fetchval("INSERT INTO jobs (type, parents) VALUES ('t', ARRAY[$1]::uuid[]) RETURNING id", a)
    assert await status(pool, c) == "waiting"
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1", a)
    assert await status(pool, c) == "pending"


async def test_children_enqueued_while_the_parent_finishes_are_never_stuck(pool):
    for _ in range(3):
        a = await enqueue(pool, job("a"))
        await pool.execute("UPDATE jobs SET status = 'running' WHERE id = $1", a)

        async def child(i: int):
            await asyncio.sleep(0.001 * (i % 5))
            return await enqueue_after(pool, job(f"c{i}"), [a])

        async def finish():
            await asyncio.sleep(0.002)
            await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1", a)

        *children, _ = await asyncio.gather(*(child(i) for i in range(20)), finish())
        assert [await status(pool, c) for c in children] == ["pending"] * 20
    assert await pending_counted(pool, "t") == sum((await f.true_pending(pool, "t")).values())


async def test_a_waiting_job_holds_its_dedupe_key(pool):
    a = await enqueue(pool, job("a"))
    first = await enqueue_after(pool, NewJob(type="t", dedupe_key="k"), [a])
    assert await enqueue(pool, NewJob(type="t", dedupe_key="k")) is None
    assert await enqueue_after(pool, NewJob(type="t", dedupe_key="k"), [a]) is None
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1", a)
    assert await status(pool, first) == "pending"


async def test_a_tenant_cannot_wait_for_another_tenants_job(pool):
    ann, bob = await f.tenant(pool, "ann@example.com"), await f.tenant(pool, "bob@example.com")
    anns = await enqueue(pool, NewJob(type="t", lane=ann.lane))
    bobs_own = await enqueue(pool, NewJob(type="t", lane=bob.lane))
    actor = await authenticate(pool, bob.key)
    with pytest.raises(ParentRefused) as refused:
        async with tenant_transaction(pool, actor) as conn:
            await enqueue_after(conn, NewJob(type="t", lane=bob.lane), [bobs_own, anns])
    assert refused.value.why == "unknown"
    async with tenant_transaction(pool, actor) as conn:  # its own jobs it may name
        assert await enqueue_after(conn, NewJob(type="t", lane=bob.lane), [bobs_own]) is not None
    assert await pool.fetchval("SELECT has_dependents FROM jobs WHERE id = $1", anns) is None
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 3


async def test_the_batch_callback_is_enqueued_once_with_overlapping_runs(pool):
    r = Recorder("work")
    cb = Recorder("report")
    lane = await f.lane(pool, await f.user(pool))
    outcome = await b.create_batch(pool, lane, [BatchRequest("work", {"name": "w1"}),
                                                BatchRequest("other", {"name": "w2", "fail": True})],
                                   callback=("report", {"name": "cb"}))
    other = Recorder("other")
    await asyncio.gather(*(run(pool, r.stage, other.stage) for _ in range(2)))
    await asyncio.gather(*(b.reconcile(pool) for _ in range(4)))
    await asyncio.gather(*(run(pool, r.stage, other.stage, cb.stage) for _ in range(2)))
    rows = await pool.fetch("SELECT payload, status FROM jobs WHERE type = 'report'")
    assert len(rows) == 1 and rows[0]["status"] == "done"
    assert rows[0]["payload"] == {"name": "cb", "batch": {"id": str(outcome.batch_id), "status": "partially_failed"}}
    assert cb.ran == ["cb"]


@pytest.mark.parametrize("returned, error", [
    ("x" * (64 * 1024), "the handler's result is 65538 bytes of JSON; at most 65536 are kept"),
    (object(), "the handler returned object, which is not JSON"),
    ({"nan": float("nan")}, "the handler returned dict, which is not JSON"),
    ("a\x00b", "the handler's result contains the NUL character"),
])
async def test_a_result_that_cannot_be_kept_fails_the_job_for_good(pool, returned, error):
    async def handle(job, ctx):
        return returned

    stage = Stage(type="t", handler=handle, lease=60, timeout=10, max_attempts=3)
    a = await enqueue(pool, job("a"))
    await run(pool, stage)
    row = await pool.fetchrow("SELECT status, attempts, last_error, result FROM jobs WHERE id = $1", a)
    assert (row["status"], row["attempts"], row["result"]) == ("failed", 1, None)
    assert row["last_error"].startswith(error)


async def test_a_result_at_the_bound_is_kept_and_none_keeps_nothing(pool):
    results = iter(["x" * (64 * 1024 - 2), None])

    async def handle(job, ctx):
        return next(results)

    stage = Stage(type="t", handler=handle, lease=60, timeout=10, batch=1)
    a = await enqueue(pool, job("a"))
    await run(pool, stage)
    b_ = await enqueue(pool, job("b"))
    await run(pool, stage)
    assert len(await pool.fetchval("SELECT result FROM jobs WHERE id = $1", a)) == 64 * 1024 - 2
    assert await pool.fetchval("SELECT result IS NULL AND status = 'done' FROM jobs WHERE id = $1", b_)
