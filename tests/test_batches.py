"""Batches: the orchestrator's dedupe, reconcile outcomes, cancel, progress."""

from __future__ import annotations

import asyncio

import pytest

from app.engine import batches as b
from app.engine import jobs as q
from app.engine.batches import BatchRequest, LaneNotFound
from app.pipeline import outcomes
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from app.settings import load_settings
from tests import factories as f

SETTINGS = load_settings(database_url="postgresql://unused")


async def owned_lane(pool):
    return await f.lane(pool, await f.user(pool))


async def test_one_job_per_type_and_open_types_are_skipped(pool):
    c = await owned_lane(pool)
    first = await b.create_batch(pool, c, [BatchRequest("fetch", {"kind": "videos"}, total=40),
                                           BatchRequest("export"), BatchRequest("fetch")])
    assert set(first.created) == {"fetch", "export"} and first.skipped == {}
    second = await b.create_batch(pool, c, [BatchRequest("fetch"), BatchRequest("score")])
    assert set(second.created) == {"score"} and second.skipped == {"fetch": first.created["fetch"]}
    third = await b.create_batch(pool, c, [BatchRequest("fetch"), BatchRequest("export")])
    assert third.batch_id is None and third.created == {}
    assert third.skipped == {"fetch": first.created["fetch"], "export": first.created["export"]}
    row = await pool.fetchrow("SELECT batch_id, total, lane FROM jobs WHERE id = $1",
                              first.created["fetch"])
    assert row["batch_id"] == first.batch_id and row["total"] == 40 and row["lane"] == c


async def test_identical_concurrent_requests_create_one_set(pool):
    c = await owned_lane(pool)

    async def ask():
        return await b.create_batch(pool, c, [BatchRequest("fetch"), BatchRequest("export")])

    outcomes = await asyncio.gather(*(ask() for _ in range(8)))
    assert len([o for o in outcomes if o.batch_id]) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2
    assert await pool.fetchval("SELECT count(*) FROM batches") == 1


async def test_unknown_lane(pool):
    with pytest.raises(LaneNotFound):
        await b.create_batch(pool, __import__("uuid").uuid4(), [BatchRequest("fetch")])


async def finish(pool, job_ids, status):
    await pool.execute("UPDATE jobs SET status = $2, attempts = 1, finished_at = now() WHERE id = ANY($1)",
                       list(job_ids), status)


@pytest.mark.parametrize("outcomes, expected", [
    (["done", "done"], "completed"),
    (["done", "failed"], "partially_failed"),
    (["failed", "failed"], "failed"),
])
async def test_reconcile_derives_the_final_status(pool, outcomes, expected):
    c = await owned_lane(pool)
    out = await b.create_batch(pool, c, [BatchRequest("a"), BatchRequest("b")])
    for (job_id, status) in zip(out.created.values(), outcomes):
        await finish(pool, [job_id], status)
    changed = await b.reconcile(pool)
    assert [(r["id"], r["status"], r["finished"]) for r in changed] == [(out.batch_id, expected, True)]
    assert await b.reconcile(pool) == []  # terminal batches are left alone
    row = await b.get_batch(pool, out.batch_id)
    assert row["status"] == expected and row["finished_at"] is not None


async def test_reconcile_moves_a_started_batch_to_running(pool):
    c = await owned_lane(pool)
    await b.create_batch(pool, c, [BatchRequest("a"), BatchRequest("b")])
    assert await b.reconcile(pool) == []  # nothing started: stays pending
    await q.claim(pool, f.lease("a"), await f.run(pool), 1)
    [row] = await b.reconcile(pool)
    assert row["status"] == "running" and not row["finished"]


async def test_a_batch_whose_last_job_died_is_not_left_running(pool):
    c = await owned_lane(pool)
    out = await b.create_batch(pool, c, [BatchRequest("a"), BatchRequest("b")])
    await finish(pool, [out.created["a"]], "done")

    async def nothing(job, ctx):
        pass

    stage = Stage(type="b", handler=nothing, lease=60, timeout=10, max_attempts=1)
    await q.claim(pool, stage.lease_terms, await f.run(pool), 1)  # its process then dies
    await b.reconcile(pool)
    assert (await b.get_batch(pool, out.batch_id))["status"] == "running"
    await f.age_lock(pool, out.created["b"], 61)
    # the next run sweeps the dead job (last attempt) and reconciles its batch
    pipeline = Pipeline(pool, [stage], SETTINGS)
    await pipeline.run("cron")
    await pipeline.run("cron")
    assert (await b.get_batch(pool, out.batch_id))["status"] == "partially_failed"


async def test_progress_and_counts_for_a_progress_bar(pool):
    c = await owned_lane(pool)
    out = await b.create_batch(pool, c, [BatchRequest("a", total=10), BatchRequest("b", total=30)])
    run_id = await f.run(pool)
    [job] = await q.claim(pool, f.lease("b"), run_id, 1)
    await b.report_progress(pool, run_id, job.id, 12)
    await finish(pool, [out.created["a"]], "done")
    row = await b.get_batch(pool, out.batch_id)
    assert (row["jobs"], row["pending"], row["running"], row["done"], row["failed"]) == (2, 0, 1, 1, 0)
    assert (row["total"], row["progress"]) == (40, 22)


async def test_cancel_stops_unstarted_work_and_asks_the_holder_of_running_work(pool):
    c = await owned_lane(pool)
    out = await b.create_batch(pool, c, [BatchRequest("a"), BatchRequest("b")])
    run_id = await f.run(pool)
    await q.claim(pool, f.lease("a"), run_id, 1)
    assert await outcomes.cancel_batch(pool, [], out.batch_id, SETTINGS) == outcomes.BatchCancel(True, 1, 1)
    assert await outcomes.cancel_batch(pool, [], out.batch_id, SETTINGS) == outcomes.BatchCancel(False, 0, 0)
    statuses = {r["type"]: r["status"] for r in await b.batch_jobs(pool, out.batch_id)}
    assert statuses == {"a": "running", "b": "cancelled"}  # a's holder is asked: it ends it
    assert await q.complete(pool, run_id, [out.created["a"]]) == [out.created["a"]]
    await b.reconcile(pool)
    assert (await b.get_batch(pool, out.batch_id))["status"] == "cancelled"
