"""Skiplock: background work in the Postgres your app already runs.

    from app import Stage, DeferJob

The public face for stage authors; everything else is internal.
"""

from app.engine.jobs import Job, NewJob
from app.pipeline.stage import Context, DeferJob, Stage, StopRun

__all__ = ["Context", "DeferJob", "Job", "NewJob", "Stage", "StopRun"]
