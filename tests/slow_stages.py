"""Stages for worker tests (PIPELINE_STAGES=tests.slow_stages:STAGES): a job that takes long."""

import asyncio

from app import Job, Stage
from app.pipeline.stage import Context


async def slow(job: Job, ctx: Context) -> None:
    await asyncio.sleep(job.payload.get("seconds", 30))


STAGES = [Stage(type="slow", handler=slow, batch=4, concurrency=4, lease=120, timeout=60)]
