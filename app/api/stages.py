"""Stages over HTTP: GET /stages (what this deployment runs, which stages are paused, and
the periodic ones' schedules) and, for operators, PATCH /stages/{type} to pause or resume
one for every lane. Thin over app.engine.stages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from app.api.auth import require_admin
from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.params import only_params
from app.engine import stages as engine
from app.json_values import stage_json
from app.pipeline.maintenance import periodic_schedules
from app.runtime import user_stages

router = APIRouter(tags=["stages"])


class ScheduleOut(BaseModel):
    everySeconds: float | None = Field(description="periods this long, from the Unix epoch (UTC); null: a cron schedule")
    cron: str | None = Field(description="the cron expression whose times begin the periods; null: every")
    timezone: str | None = Field(description="the IANA zone whose clock the cron expression reads; null: every")
    catchUp: int = Field(description="periods missed while no run started that still get a job, at most")
    lastPeriod: datetime | None = Field(description="the start of the period last enqueued; null: never")
    lastEnqueuedSecondsAgo: float | None = Field(description="how long ago it was enqueued")
    nextPeriod: datetime | None = Field(description="when the next period begins")


class RateOut(BaseModel):
    starts: int = Field(description="at most this many starts")
    perSeconds: float = Field(description="in any window this long")


class StageOut(BaseModel):
    type: str = Field(description="the job type the stage runs")
    batch: int = Field(description="jobs claimed at once")
    concurrency: int = Field(description="of those, run at once by one run")
    leaseSeconds: float = Field(description="how long a claim holds a job before another run may take it")
    maxAttempts: int
    globalConcurrency: int | None = Field(description="at most this many of its jobs held at once across "
                                                      "every run; null: no such limit")
    rate: RateOut | None = Field(description="at most so many of its jobs start in any window, across "
                                             "every run; null: no such limit")
    limitBy: str | None = Field(description='"lane" or "payload.<field>": globalConcurrency and rate hold per '
                                            "this key of the job; null: for the stage as a whole")
    paused: bool = Field(description="true: nothing of this stage is claimed, in any lane, until it is resumed")
    pausedAt: datetime | None
    schedule: ScheduleOut | None = Field(description="a periodic stage's schedule; null: not periodic "
                                                     "(docs/scheduling.md#periodic-stages)")


class StagePage(BaseModel):
    data: list[StageOut] = Field(description="in pipeline order: earlier stages win")


class StagePause(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    paused: bool = Field(description="true: pause the stage for every lane; false: resume it")


@router.get("/stages", response_model=StagePage, summary="List the stages",
            dependencies=[Depends(only_params())])
async def list_stages(request: Request) -> dict[str, Any]:
    """The stages this deployment runs, earliest first, whether each is paused, and the
    schedule of each periodic one."""
    return {"data": await _stages_out(await pool_of(request), user_stages(request.app.state.runtime.stages))}


@router.patch("/stages/{type}", response_model=StageOut, summary="Pause or resume a stage (operators)",
              dependencies=[Depends(require_admin), Depends(only_params())],
              responses={403: {"description": "not an admin key"},
                         404: {"description": "no stage of this type runs here"}})
async def pause_stage(body: StagePause, request: Request,
                      type_: str = Path(alias="type", description="the stage's job type")) -> dict[str, Any]:
    """Pause a stage for every lane (running jobs finish; nothing more is claimed) or
    resume it. Audited; the next claim sees it."""
    stage = next((s for s in user_stages(request.app.state.runtime.stages) if s.type == type_), None)
    if stage is None:
        raise ApiError(404, "not_found", f"no stage {type_!r} runs here")
    db = await pool_of(request)
    await (engine.pause_stage if body.paused else engine.resume_stage)(db, type_)
    [out] = await _stages_out(db, [stage])
    return out


async def _stages_out(db, stages: list) -> list[dict[str, Any]]:
    paused = await engine.paused_stages(db)
    schedules = await periodic_schedules(db, stages)
    return [{**stage_json(s, paused), "schedule": schedules.get(s.type)} for s in stages]
