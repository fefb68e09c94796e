"""A stage's global_concurrency holds across every run: ten overlapping runs of a stage
limited to 3 never have more than 3 of its handlers going at once (counted by the handlers
themselves), nothing is lost, and a dead holder's places come back when its leases expire."""

from __future__ import annotations

import asyncio

import pytest

from app import Stage
from app.engine import jobs as q
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f


async def test_ten_overlapping_runs_keep_to_the_limit(pool):
    going, most, done = 0, 0, []

    async def call_the_api(job, ctx):
        nonlocal going, most
        going += 1
        most = max(most, going)
        try:
            await asyncio.sleep(0.02)
        finally:
            going -= 1
        done.append(job.id)

    ids = await f.jobs(pool, "rationed", 60)
    stage = Stage(type="rationed", handler=call_the_api, batch=5, concurrency=5, global_concurrency=3)
    settings = load_settings(pipeline_plugins="", run_scheduler=False)
    results = await asyncio.gather(*(Pipeline(pool, [stage], settings).run("manual", budget=60)
                                     for _ in range(10)))
    assert sum(r.jobs_done for r in results) == 60 and sorted(done) == sorted(ids)
    assert most <= 3 and most >= 2  # the limit held, and it was reached: runs did overlap
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE attempts <> 1") == 0  # no attempt burnt


async def test_a_dead_holders_places_come_back_with_its_leases(pool):
    lease = q.Lease("rationed", 60, 3, global_concurrency=2)
    held = await f.jobs(pool, "rationed", 2)
    await f.jobs(pool, "rationed", 3)
    dead = await f.run(pool)
    await pool.execute("UPDATE jobs SET status = 'running', attempts = 1, run_id = $2, locked_at = now() "
                       "WHERE id = ANY($1)", held, dead)
    assert await q.claim(pool, lease, await f.run(pool), 10) == []  # both places are taken
    await pool.execute("UPDATE jobs SET locked_at = now() - interval '2 minutes' WHERE id = ANY($1)", held)
    again = await q.claim(pool, lease, await f.run(pool), 10)
    assert len(again) == 2  # the expired leases free their places, and no more


def test_a_limit_is_a_whole_number_of_at_least_one():
    async def h(job, ctx):
        pass
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="global_concurrency must be a whole number"):
            Stage(type="t", handler=h, global_concurrency=bad)
