"""The default stage list (PIPELINE_STAGES=app.stages:STAGES).

Bring your own with PIPELINE_STAGES=yourpackage.module:STAGES: a list of Stage,
earliest stage first (earlier stages win when several have work).
"""

from app import Job, Stage
from app.pipeline.stage import Context


async def echo(job: Job, ctx: Context) -> None:
    """The smallest useful stage: count the message it was given."""
    ctx.count("echoed")


STAGES = [
    Stage(type="echo", handler=echo, batch=25, concurrency=5, lease=60, timeout=10),
]
