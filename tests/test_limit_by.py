"""A stage's limits held per key (limit_by): with one at a time per account, overlapping runs
never have two jobs of one account going at once while every account's work goes on; a
key at its limit waits and the other keys are claimed; a dead holder's key comes back with
its lease; a rate per key counts each key's starts."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app import Stage
from app.engine import jobs as q
from app.engine.claim_limits import Rate
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f


async def account_jobs(pool, type_: str, accounts: list[str], each: int, lane=None) -> list[uuid.UUID]:
    """`each` jobs per account, the accounts' jobs interleaved and created in that order."""
    return await q.enqueue_many(pool, [q.NewJob(type=type_, lane=lane, payload={"account_id": a, "n": n})
                                       for n in range(each) for a in accounts])


async def test_one_at_a_time_per_account_across_overlapping_runs(pool):
    going: dict[str, int] = {}
    most_per_account, most_at_once, done = 0, 0, []

    async def send(job, ctx):
        nonlocal most_per_account, most_at_once
        account = job.payload["account_id"]
        going[account] = going.get(account, 0) + 1
        most_per_account = max(most_per_account, going[account])
        most_at_once = max(most_at_once, sum(going.values()))
        try:
            await asyncio.sleep(0.03)
        finally:
            going[account] -= 1
        done.append(job.id)

    ids = await account_jobs(pool, "send", ["a", "b", "c"], 8)
    stage = Stage(type="send", handler=send, batch=5, concurrency=5, global_concurrency=1,
                  limit_by="payload.account_id")
    settings = load_settings(pipeline_plugins="", run_scheduler=False)
    pipelines = [Pipeline(pool, [stage], settings) for _ in range(4)]

    async def idle(wait: float) -> None:
        if len(done) == len(ids):
            for p in pipelines:
                p.stop(0)
        await asyncio.sleep(min(wait, 0.02))
    results = await asyncio.gather(*(p.run("manual", budget=30, idle=idle) for p in pipelines))
    assert sum(r.jobs_done for r in results) == 24 and sorted(done) == sorted(ids)
    assert most_per_account == 1       # never two of one account at once
    assert most_at_once == 3           # while the three accounts went on side by side
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE attempts <> 1") == 0  # no attempt burnt


async def test_a_key_at_its_limit_waits_and_the_others_are_claimed(pool):
    lease = q.Lease("send", 60, 3, global_concurrency=1, limit_by="payload.account_id")
    await account_jobs(pool, "send", ["a"], 30)  # a's backlog comes first in the claim order
    await account_jobs(pool, "send", ["b", "c"], 2)
    first = await q.claim(pool, lease, await f.run(pool), 10)
    assert [j.payload["account_id"] for j in first] == ["a"]  # one of a's: a's backlog crowded the claim
    then = await q.claim(pool, lease, await f.run(pool), 10)
    assert sorted(j.payload["account_id"] for j in then) == ["b", "c"]  # a waits; b and c do not
    assert await q.claim(pool, lease, await f.run(pool), 10) == []  # every key is at its limit
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending' AND attempts > 0") == 0


async def test_limited_by_lane(pool):
    lease = q.Lease("send", 60, 3, global_concurrency=2, limit_by="lane")
    one, two = await f.lane(pool), await f.lane(pool)
    await f.jobs(pool, "send", 5, lane=one)
    await f.jobs(pool, "send", 1, lane=two)
    claimed = await q.claim(pool, lease, await f.run(pool), 10)
    assert sorted(str(j.lane) for j in claimed) == sorted([str(one), str(one), str(two)])


async def test_a_dead_holders_key_comes_back_with_its_lease(pool):
    lease = q.Lease("send", 60, 3, global_concurrency=1, limit_by="payload.account_id")
    await account_jobs(pool, "send", ["a", "b"], 2)
    dead = await f.run(pool)
    held = await q.claim(pool, lease, dead, 10)  # one of a's, one of b's
    assert sorted(j.payload["account_id"] for j in held) == ["a", "b"]
    assert await q.claim(pool, lease, await f.run(pool), 10) == []  # both keys held by the dead run
    await pool.execute("UPDATE jobs SET locked_at = now() - interval '2 minutes' WHERE id = ANY($1)",
                       [j.id for j in held])
    again = await q.claim(pool, lease, await f.run(pool), 10)
    # the expired leases give the keys back: one job each, the dead holder's own first
    assert {j.id for j in again} == {j.id for j in held}


async def test_a_rate_per_key_counts_each_keys_starts(pool):
    lease = q.Lease("send", 60, 3, rate=Rate(2, 60), limit_by="payload.account_id")
    await account_jobs(pool, "send", ["a", "b"], 3)
    await q.enqueue(pool, q.NewJob(type="send", payload={"n": "no account"}))
    claimed = await q.claim(pool, lease, await f.run(pool), 10)
    assert sorted(j.payload.get("account_id", "") for j in claimed) == ["", "a", "a", "b", "b"]
    await pool.execute("UPDATE jobs SET status = 'done' WHERE status = 'running'")
    assert await q.claim(pool, lease, await f.run(pool), 10) == []  # done or not, they started


async def test_a_nested_payload_field(pool):
    lease = q.Lease("send", 60, 3, global_concurrency=1, limit_by="payload.to.account")
    await q.enqueue_many(pool, [q.NewJob(type="send", payload={"to": {"account": a}}) for a in "aab"])
    claimed = await q.claim(pool, lease, await f.run(pool), 10)
    assert sorted(j.payload["to"]["account"] for j in claimed) == ["a", "b"]


def test_limit_by_is_the_lane_or_a_payload_field_and_needs_a_limit():
    async def h(job, ctx):
        pass
    for bad in ("account_id", "payload.", "payload..x", "lanes", 3):
        with pytest.raises(ValueError, match='limit_by must be "lane" or "payload.<field>"'):
            Stage(type="t", handler=h, global_concurrency=1, limit_by=bad)
    with pytest.raises(ValueError, match="limit_by needs a limit"):
        Stage(type="t", handler=h, limit_by="lane")
