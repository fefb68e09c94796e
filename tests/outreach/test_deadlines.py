"""The due-time example: a deadline fires at its time, once, and not when resolved."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from app.engine.jobs import DEFAULT_LANE, Job
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Context, Tally
from app.settings import load_settings
from app.outreach.deadlines import DEADLINE_STAGE, check_deadline, resolve_deadline, start_deadline

SETTINGS = load_settings(database_url="postgresql://unused")


async def test_a_deadline_fires_when_due_and_only_once(pool):
    soon = datetime.now(timezone.utc) + timedelta(hours=4)
    breached = await start_deadline(pool, "ticket:1", soon)
    kept = await start_deadline(pool, "ticket:2", soon)
    pipeline = Pipeline(pool, [DEADLINE_STAGE], SETTINGS)
    first = await pipeline.run("cron")
    assert "deadlines_breached" not in first.summary  # not due yet
    assert await resolve_deadline(pool, kept)
    await pool.execute("UPDATE deadlines SET due_at = now() - interval '1 second'")
    await pool.execute("UPDATE jobs SET run_after = now() WHERE type = 'deadline'")  # four hours later
    second = await pipeline.run("cron")
    assert second.summary["counts"]["deadlines_breached"] == 1
    rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM deadlines")}
    assert rows[breached]["breached_at"] is not None and rows[kept]["breached_at"] is None
    assert not await resolve_deadline(pool, breached)  # too late


async def test_two_runs_seeing_one_deadline_latch_it_once(pool):
    deadline = await start_deadline(pool, "ticket:3", datetime.now(timezone.utc) - timedelta(seconds=1))
    job = Job(id=deadline, type="deadline", payload={"deadline_id": str(deadline)}, attempts=1,
              lane=DEFAULT_LANE, run_id=None)
    tallies = [Tally() for _ in range(6)]
    await asyncio.gather(*(check_deadline(job, Context(db=pool, run_id=None, trigger="t", settings=None,
                                                       deadline=0, tally=t)) for t in tallies))
    assert sum(t.counts.get("deadlines_breached", 0) for t in tallies) == 1
