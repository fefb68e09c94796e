"""Skiplock: background work in the Postgres your app already runs.

    from app import Stage, DeferJob

The public face for stage authors; everything else is internal. The names are imported
on first use, so that importing a submodule (the Lambda handler, say) does not pay for
the engine: a cold start imports only what its event needs.
"""

from importlib import import_module
from typing import TYPE_CHECKING

_WHERE = {
    "Job": "app.engine.jobs", "NewJob": "app.engine.jobs",
    "Context": "app.pipeline.stage", "DeferJob": "app.pipeline.stage", "FailJob": "app.pipeline.stage",
    "JobRefused": "app.pipeline.stage", "Stage": "app.pipeline.stage", "StopRun": "app.pipeline.stage",
    "Plugin": "app.plugin",
}

__all__ = ["Context", "DeferJob", "FailJob", "Job", "JobRefused", "NewJob", "Plugin", "Stage", "StopRun"]

if TYPE_CHECKING:
    from app.engine.jobs import Job, NewJob
    from app.pipeline.stage import Context, DeferJob, FailJob, JobRefused, Stage, StopRun
    from app.plugin import Plugin


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'app' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value
