"""A stage list for CLI tests (PIPELINE_STAGES=tests.sample_stages:STAGES)."""

from app import Job, JobRefused, Stage
from app.pipeline.stage import Context


async def echo(job: Job, ctx: Context) -> None:
    ctx.count("echoed")


STAGES = [Stage(type="echo", handler=echo, batch=25, concurrency=5, lease=60, timeout=10)]

# The same with periodic stages, one of each kind (PIPELINE_STAGES=tests.sample_stages:WITH_SCHEDULES)
WITH_SCHEDULES = [*STAGES, Stage(type="hourly", handler=echo, every=3600),
                  Stage(type="weekdays", handler=echo, cron="0 3 * * MON-FRI", tz="Europe/Berlin", catch_up=2)]


async def only_ok(db, lane, payload) -> None:
    if payload.get("ok") is not True:
        raise JobRefused("this job is not ok")


# With a stage that has its say where people enqueue (PIPELINE_STAGES=tests.sample_stages:WITH_PICKY)
WITH_PICKY = [*STAGES, Stage(type="picky", handler=echo, accepts=only_ok)]
