"""A stage list for CLI tests (PIPELINE_STAGES=tests.sample_stages:STAGES)."""

from app import Job, JobRefused, Stage
from app.pipeline.stage import Context


async def echo(job: Job, ctx: Context) -> None:
    ctx.count("echoed")


STAGES = [Stage(type="echo", handler=echo, batch=25, concurrency=5, lease=60, timeout=10)]

# The same with a periodic stage (PIPELINE_STAGES=tests.sample_stages:WITH_HOURLY)
WITH_HOURLY = [*STAGES, Stage(type="hourly", handler=echo, every=3600)]


async def only_ok(db, lane, payload) -> None:
    if payload.get("ok") is not True:
        raise JobRefused("this job is not ok")


# With a stage that has its say where people enqueue (PIPELINE_STAGES=tests.sample_stages:WITH_PICKY)
WITH_PICKY = [*STAGES, Stage(type="picky", handler=echo, accepts=only_ok)]
