"""Periodic stages (Stage.every): one job a period, however many runs start in it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from app import DeferJob, Stage
from app.engine.queries import statement
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import schedule_periodic
from app.settings import load_settings

# Periods this long start decades apart: no test here sees one end while it runs.
CENTURY = 100 * 365 * 86400


def pipeline(pool, stages, **settings):
    return Pipeline(pool, stages, load_settings(database_url="postgresql://unused", **settings))


async def period_start(pool, every: float) -> datetime:
    return await pool.fetchval("SELECT to_timestamp(floor(extract(epoch FROM now()) / $1) * $1)", float(every))


async def test_runs_in_one_period_run_the_periodic_stage_once(pool):
    seen = []

    async def digest(job, ctx):
        seen.append(job.payload)

    stages = [Stage(type="digest", handler=digest, every=CENTURY)]
    first = await pipeline(pool, stages).run("cron")
    second = await pipeline(pool, stages).run("cron")
    assert seen == [{"period": (await period_start(pool, CENTURY)).isoformat()}]
    assert first.summary["counts"]["periodic_enqueued"] == 1 and "periodic_enqueued" not in second.summary["counts"]
    assert first.summary["stages"]["digest"]["done"] == 1 and first.jobs_done == 1


async def test_pruning_keeps_the_tick_that_says_a_long_period_was_served(pool):
    """Ticks older than two days are pruned, but a task's newest one stays: it is a weekly
    stage's current period for most of the week (here, one that began in 1970)."""
    async def digest(job, ctx):
        pass

    stages = [Stage(type="digest", handler=digest, every=CENTURY)]
    assert await schedule_periodic(pool, stages) == ["digest"]
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now()")
    await pool.execute("INSERT INTO recurring_ticks (task, period) VALUES ('stage:digest', '1960-01-01')")
    await pool.fetchval(*statement("prune_bookkeeping").bind())
    assert [r["period"].year for r in await pool.fetch("SELECT period FROM recurring_ticks")] == [1970]
    assert await schedule_periodic(pool, stages) == []


async def test_the_period_starts_on_a_multiple_of_every_since_the_epoch(pool):
    async def hourly(job, ctx):
        pass

    await schedule_periodic(pool, [Stage(type="hourly", handler=hourly, every=timedelta(hours=1))])
    payload = await pool.fetchval("SELECT payload FROM jobs WHERE type = 'hourly'")
    start = datetime.fromisoformat(payload["period"])
    assert start.timestamp() % 3600 == 0
    assert timedelta(0) <= datetime.now(timezone.utc) - start < timedelta(hours=1, seconds=5)


async def test_overlapping_schedulers_enqueue_one_job(pool):
    async def digest(job, ctx):
        pass

    stages = [Stage(type="digest", handler=digest, every=CENTURY)]
    made = await asyncio.gather(*(schedule_periodic(pool, stages) for _ in range(10)))
    assert sorted(map(len, made)) == [0] * 9 + [1]
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'digest'") == 1


async def test_a_job_still_open_from_an_earlier_period_is_not_joined_by_another(pool):
    async def slow(job, ctx):
        raise DeferJob(until=3600)  # still waiting when the next periods begin

    stages = [Stage(type="slow", handler=slow, every=1)]
    await pipeline(pool, stages).run("cron")
    for _ in range(2):
        await asyncio.sleep(1.05)  # a new period
        await schedule_periodic(pool, stages)
    assert await pool.fetchval("SELECT count(*) FROM recurring_ticks WHERE task = 'stage:slow'") == 3
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'slow'") == 1
    # once it has ended, the next period adds one again
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE type = 'slow'")
    await asyncio.sleep(1.05)
    assert await schedule_periodic(pool, stages) == ["slow"]


async def test_a_deployment_that_does_not_schedule_enqueues_none(pool):
    async def digest(job, ctx):
        raise AssertionError("nothing was scheduled")

    result = await pipeline(pool, [Stage(type="digest", handler=digest, every=CENTURY)],
                            run_scheduler=False).run("cron")
    assert result.stop_reason == "no_work"
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'digest'") == 0


async def test_stages_without_every_are_not_scheduled(pool):
    async def once(job, ctx):
        pass

    assert await schedule_periodic(pool, [Stage(type="once", handler=once)]) == []
    assert await pool.fetchval("SELECT count(*) FROM recurring_ticks") == 0


@pytest.mark.parametrize("every", [0, -5, 0.5, float("nan"), float("inf"), timedelta(0)])
def test_every_must_be_at_least_a_second(every):
    async def h(job, ctx):
        pass

    with pytest.raises(ValueError, match="every must be at least one second"):
        Stage(type="t", handler=h, every=every)
