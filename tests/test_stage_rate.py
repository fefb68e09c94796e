"""A stage's rate holds across every run: overlapping runs of a stage allowed 5 starts per
2 s never start more than 5 of its jobs in any 2 s (timed by the handlers themselves), a
job held back waits pending with its attempt unused, and a dead run's starts still count."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from app import Stage
from app.engine import jobs as q
from app.engine.claim_limits import Rate
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f


def most_in_any_window(starts: list[float], seconds: float) -> int:
    """The most starts inside any window of `seconds` (each window opening at a start)."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t - s < seconds) for i, s in enumerate(starts))


async def overlapping_workers(pool, stage: Stage, runs: int, until_done, budget: float) -> list:
    """`runs` pipelines at once, each as a worker does (idle between looks), stopped once
    until_done() says all the work is done."""
    settings = load_settings(pipeline_plugins="", run_scheduler=False)
    pipelines = [Pipeline(pool, [stage], settings) for _ in range(runs)]

    async def idle(wait: float) -> None:
        if until_done():
            for p in pipelines:
                p.stop(0)
        await asyncio.sleep(min(wait, 0.05))
    return await asyncio.gather(*(p.run("manual", budget=budget, idle=idle) for p in pipelines))


async def test_overlapping_runs_start_at_most_n_in_any_window(pool):
    starts: list[float] = []
    done = []

    async def call_the_api(job, ctx):
        starts.append(time.monotonic())
        await asyncio.sleep(0.05)
        done.append(job.id)

    ids = await f.jobs(pool, "rated", 15)
    stage = Stage(type="rated", handler=call_the_api, batch=5, concurrency=5, rate=(5, 2))
    results = await overlapping_workers(pool, stage, 3, lambda: len(done) == 15, budget=30)
    assert sum(r.jobs_done for r in results) == 15
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'done' AND attempts = 1") == len(ids)
    assert most_in_any_window(starts, 2.0) == 5  # never more, and the limit was reached
    assert max(starts) - min(starts) >= 4.0      # 15 starts at 5 per 2 s take two windows more


async def test_a_job_held_back_by_the_rate_waits_pending_with_its_attempt_unused(pool):
    lease = q.Lease("rated", 60, 3, rate=Rate(2, 60))
    await f.jobs(pool, "rated", 5)
    assert len(await q.claim(pool, lease, await f.run(pool), 10)) == 2
    assert await q.claim(pool, lease, await f.run(pool), 10) == []
    rows = await pool.fetch("SELECT status, attempts FROM jobs WHERE status = 'pending'")
    assert len(rows) == 3 and all(r["attempts"] == 0 for r in rows)


async def test_a_dead_runs_starts_still_count(pool):
    """A killed run's jobs did start: their starts hold the window shut, and once their
    leases expire the claim takes them back only as the rate allows."""
    lease = q.Lease("rated", 60, 3, rate=Rate(2, 60))
    await f.jobs(pool, "rated", 4)
    dead = await f.run(pool)
    taken = await q.claim(pool, lease, dead, 10)
    await pool.execute("UPDATE jobs SET locked_at = now() - interval '2 minutes' WHERE id = ANY($1)",
                       [j.id for j in taken])
    assert await q.claim(pool, lease, await f.run(pool), 10) == []  # the dead run's 2 starts fill the window
    await pool.execute("UPDATE stage_starts SET started_at = started_at - interval '61 seconds'")
    again = await q.claim(pool, lease, await f.run(pool), 10)
    assert {j.id for j in again} == {j.id for j in taken}  # the window reopened: the dead holder's first


async def test_a_stage_without_limits_records_no_starts(pool):
    await f.jobs(pool, "free", 3)
    assert len(await q.claim(pool, f.lease("free"), await f.run(pool), 10)) == 3
    assert await pool.fetchval("SELECT count(*) FROM stage_starts") == 0


def test_a_rate_is_n_starts_per_a_positive_number_of_seconds():
    async def h(job, ctx):
        pass
    assert Stage(type="t", handler=h, batch=1, rate=(3, timedelta(minutes=1))).rate == Rate(3, 60.0)
    for bad, said in [((0, 1), "whole number"), ((2.5, 1), "whole number"), ((True, 1), "whole number"),
                      ((3, 0), "positive"), ((3, -1), "positive"), ((3, float("inf")), "positive"),
                      ((3, "1"), "positive"), (3, r"\(N, per_seconds\)"), ((1, 2, 3), r"\(N, per_seconds\)")]:
        with pytest.raises(ValueError, match=said):
            Stage(type="t", handler=h, batch=1, rate=bad)


def test_a_rated_stage_claims_no_more_than_it_starts_at_once():
    async def h(job, ctx):
        pass
    with pytest.raises(ValueError, match=r"batch \(10\) must not be larger than its concurrency \(1\)"):
        Stage(type="t", handler=h, rate=(5, 1))
    Stage(type="t", handler=h, rate=(5, 1), batch=3, concurrency=3)
