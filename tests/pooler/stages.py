"""Stages for the pooler and restart tests, run by `python -m app run-once` subprocesses
(PIPELINE_STAGES=tests.pooler.stages:ECHO, ...)."""

import asyncio

from app import Job, Stage
from app.pipeline.stage import Context


async def echo(job: Job, ctx: Context) -> None:
    await asyncio.sleep(job.payload.get("seconds", 0))


async def hold(job: Job, ctx: Context) -> None:
    """The first attempt takes long enough to be killed in; a later one is quick."""
    if job.attempts == 1:
        await asyncio.sleep(60)


# a two-second lease: what a run dropped is claimable again two seconds later
ECHO = [Stage(type="echo", handler=echo, batch=10, concurrency=5, lease=2, timeout=1, max_attempts=5)]
HOLD = [Stage(type="hold", handler=hold, batch=2, concurrency=2, lease=120, timeout=90)]
BOTH = HOLD + ECHO
