"""Skiplock: background work in the Postgres your app already runs.

    from app import Stage, DeferJob

The public face for stage authors; everything else is internal.
"""

from app.engine.jobs import Job, NewJob
from app.pipeline.stage import Context, DeferJob, FailJob, Stage, StopRun
from app.plugin import Plugin

__all__ = ["Context", "DeferJob", "FailJob", "Job", "NewJob", "Plugin", "Stage", "StopRun"]
