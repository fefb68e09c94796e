"""A job's own priority, the enqueue side: every way in stores the priority it was given
(0 when none), every answer about a job shows it, bad values are refused in the API's and
the CLI's own way, and a run starts a lane's jobs highest priority first, then oldest."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from app import NewJob, Stage
from app.engine import jobs as q
from app.engine.dependencies import enqueue_after
from app.pipeline import admission
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f
from tests.api.serving_kit import assert_error
from tests.cli.conftest import cli  # noqa: F401  (a fixture: `skiplock` in-process)
from tests.cli.test_cli_operator import ok_json, one_line
from tests.test_outcomes import client_for  # noqa: F401  (a fixture: the app on these stages, an admin key)

SETTINGS = load_settings(database_url="postgresql://unused", run_scheduler=False)


class InOrder:
    """A stage that records the order its jobs start in, one at a time."""

    def __init__(self, type_: str = "t") -> None:
        self.started: list[uuid.UUID] = []
        self.stage = Stage(type=type_, handler=self.handle, batch=1, concurrency=1, lease=60, timeout=10)

    async def handle(self, job, ctx) -> None:
        self.started.append(job.id)


async def priority_of(pool, job_id) -> int:
    return await pool.fetchval("SELECT priority FROM jobs WHERE id = $1", job_id)


# ---- the engine and plain SQL ------------------------------------------------------------

async def test_every_engine_enqueue_stores_its_priority_and_0_by_default(pool):
    lane = await f.lane(pool)
    given = await q.enqueue(pool, NewJob(type="t", lane=lane, priority=7))
    plain = await q.enqueue(pool, NewJob(type="t", lane=lane))
    many = await q.enqueue_many(pool, [NewJob(type="t", lane=lane, priority=p) for p in (3, 0, -2)])
    waits = await enqueue_after(pool, NewJob(type="t", lane=lane, priority=-9), [given])
    fresh, created = await q.enqueue_replacing(pool, NewJob(type="t", lane=lane, dedupe_key="k", priority=4))
    assert created
    assert [await priority_of(pool, i) for i in (given, plain, *many, waits, fresh)] == [7, 0, 3, 0, -2, -9, 4]
    assert await priority_of(pool, await enqueue_after(pool, NewJob(type="t", lane=lane), [given])) == 0


async def test_a_debounce_keeps_the_pending_jobs_own_priority(pool):
    first, _ = await q.enqueue_replacing(pool, NewJob(type="t", dedupe_key="k", payload={"v": 1}, priority=4))
    again, created = await q.enqueue_replacing(pool, NewJob(type="t", dedupe_key="k", payload={"v": 2}, priority=9))
    row = await f.job_row(pool, first)
    assert (again, created, row["payload"], row["priority"]) == (first, False, {"v": 2}, 4)


async def test_the_bounds_are_a_smallints(pool):
    low = await q.enqueue(pool, NewJob(type="t", priority=q.PRIORITY_MIN))
    high = await q.enqueue(pool, NewJob(type="t", priority=q.PRIORITY_MAX))
    assert (await priority_of(pool, low), await priority_of(pool, high)) == (-32768, 32767)
    with pytest.raises(asyncpg.DataError):  # asyncpg will not send it as a smallint
        await q.enqueue(pool, NewJob(type="t", priority=q.PRIORITY_MAX + 1))


async def test_plain_sql_gives_a_priority_or_gets_0(pool):
    given = await pool.fetchval("INSERT INTO jobs (type, priority) VALUES ('t', 5) RETURNING id")
    plain = await pool.fetchval("INSERT INTO jobs (type) VALUES ('t') RETURNING id")
    assert (await priority_of(pool, given), await priority_of(pool, plain)) == (5, 0)
    with pytest.raises(asyncpg.NumericValueOutOfRangeError):
        await pool.execute("INSERT INTO jobs (type, priority) VALUES ('t', 40000)")


async def test_a_handler_gives_its_follow_up_a_priority_or_it_is_0(pool):
    made: list[uuid.UUID] = []

    async def hand_on(job, ctx) -> None:
        made.append(await q.enqueue(ctx.db, NewJob(type="next", lane=job.lane, priority=6)))
        made.append(await q.enqueue(ctx.db, NewJob(type="next", lane=job.lane)))

    await q.enqueue(pool, NewJob(type="first", priority=2))
    await Pipeline(pool, [Stage(type="first", handler=hand_on, lease=60, timeout=10)], SETTINGS).run("test")
    assert [await priority_of(pool, i) for i in made] == [6, 0]


async def test_admission_refuses_a_priority_the_column_cannot_hold(pool):
    stages = [InOrder().stage]
    for bad in (q.PRIORITY_MAX + 1, q.PRIORITY_MIN - 1, True, 1.5):
        with pytest.raises(admission.NotAdmitted) as refused:
            await admission.admit(pool, stages, "t", {}, lane=q.DEFAULT_LANE, settings=SETTINGS, priority=bad)
        assert refused.value.code == "invalid_value" and "priority" in refused.value.message
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


# ---- the API --------------------------------------------------------------------------

async def test_post_jobs_stores_the_priority_and_every_answer_shows_it(pool, client_for):
    client = await client_for([InOrder().stage])
    lane = str(await f.lane(pool))
    made = await client.post("/jobs", json={"type": "t", "lane": lane, "priority": 5})
    assert made.status_code == 201, made.text
    job = made.json()["job"]
    assert job["priority"] == 5 and await priority_of(pool, uuid.UUID(job["id"])) == 5
    plain = (await client.post("/jobs", json={"type": "t", "lane": lane})).json()["job"]
    whole = (await client.post("/jobs", json={"type": "t", "lane": lane, "priority": -3.0})).json()["job"]
    assert (plain["priority"], whole["priority"]) == (0, -3)  # -3.0 is JSON Schema's integer -3

    assert (await client.get(f"/jobs/{job['id']}")).json()["priority"] == 5
    assert (await client.get(f"/jobs/{job['id']}/timeline")).json()["job"]["priority"] == 5
    listed = {r["id"]: r["priority"] for r in (await client.get("/jobs")).json()["data"]}
    assert listed == {job["id"]: 5, plain["id"]: 0, whole["id"]: -3}
    by_lane = {r["id"]: r["priority"] for r in (await client.get(f"/jobs?lane={lane}")).json()["data"]}
    assert by_lane == listed
    cancelled = (await client.post(f"/jobs/{job['id']}/cancel")).json()
    assert cancelled["priority"] == 5
    assert (await client.post(f"/jobs/{job['id']}/retry")).json()["priority"] == 5


async def test_a_batch_stores_each_jobs_priority(pool, client_for):
    client = await client_for([InOrder("a").stage, InOrder("b").stage])
    lane = await f.lane(pool)
    made = await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "a", "priority": 9}, {"type": "b"}]})
    assert made.status_code == 201, made.text
    created = made.json()["created"]
    assert (await priority_of(pool, uuid.UUID(created["a"])), await priority_of(pool, uuid.UUID(created["b"]))) == (9, 0)
    children = (await client.get(f"/batches/{made.json()['batchId']}")).json()["children"]
    assert {c["type"]: c["priority"] for c in children} == {"a": 9, "b": 0}


@pytest.mark.parametrize("bad", [32768, -32769, 1.5, "5", True, None, 10**30])
async def test_a_bad_priority_is_a_422_with_the_error_shape(pool, client_for, bad):
    client = await client_for([InOrder().stage])
    lane = str(await f.lane(pool))
    error = assert_error(await client.post("/jobs", json={"type": "t", "lane": lane, "priority": bad}),
                         422, "invalid_request")
    assert [d["location"] for d in error["details"]] == ["body.priority"]
    error = assert_error(await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "t", "priority": bad}]}),
                         422, "invalid_request")
    assert [d["location"] for d in error["details"]] == ["body.jobs.0.priority"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_run_starts_a_lanes_jobs_highest_priority_first_then_oldest(pool, client_for):
    """Through the real API and a real run: priorities 0, 5, -3, 5, 0 in one lane start as
    5, 5 (the older first), 0, 0 (the older first), -3."""
    order = InOrder()
    client = await client_for([order.stage])
    lane = str(await f.lane(pool))
    ids = []
    for p in (0, 5, -3, 5, 0):
        made = await client.post("/jobs", json={"type": "t", "lane": lane, "priority": p})
        assert made.status_code == 201, made.text
        ids.append(uuid.UUID(made.json()["job"]["id"]))
    # one claim at a time: two claim streams in flight are fair between lanes, not in exact
    # order (docs/queue.md)
    one_stream = SETTINGS.model_copy(update={"pipeline_claim_streams": 1})
    result = await Pipeline(pool, [order.stage], one_stream).run("test", budget=30)
    assert result.jobs_done == 5
    assert order.started == [ids[1], ids[3], ids[0], ids[4], ids[2]]


# ---- the CLI ----------------------------------------------------------------------------

async def test_skiplock_enqueue_takes_a_priority_and_jobs_show_prints_it(pool, cli):
    given = ok_json(await cli("enqueue", "echo", "--priority", "9"))["job"]
    below = ok_json(await cli("enqueue", "echo", "--priority=-4"))["job"]
    plain = ok_json(await cli("enqueue", "echo"))["job"]
    assert (given["priority"], below["priority"], plain["priority"]) == (9, -4, 0)
    assert await priority_of(pool, uuid.UUID(given["id"])) == 9
    shown = (await cli("jobs", "show", given["id"])).stdout.splitlines()
    assert [line.split() for line in shown if line.startswith("priority:")] == [["priority:", "9"]]
    assert ok_json(await cli("jobs", "show", below["id"], "--json"))["priority"] == -4


@pytest.mark.parametrize("value", ["high", "1.5", "32768", "-32769", "\u00b2"])
async def test_a_bad_priority_on_the_cli_is_one_line(pool, cli, value):
    one_line(await cli("enqueue", "echo", f"--priority={value}"), 2, "--priority")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
