"""The invocation log over HTTP: what each run did, and why it stopped.

GET /runs is the "what happened at 3am" view: newest first, keyset pages, filterable
by stop reason (or 'running' for runs not finished) and trigger."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from app.api.cache import CACHED, cached_json
from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.pagination import ListQuery, enum_param, word_param
from app.api.params import only_params
from app.engine import runs as run_log
from app.runtime import run_json

router = APIRouter(tags=["runs"])

STOP_REASONS = run_log.STOP_REASONS

RUN_LIST = ListQuery("runs", [
    enum_param("stop_reason", "only runs that stopped for this reason ('running': not finished yet)",
               (*STOP_REASONS, "running")),
    word_param("trigger", "only runs started this way (cron, http, manual, worker, ...)", 50),
])


class RunOut(BaseModel):
    """A run, the same everywhere: GET /runs, GET /runs/{id} and /cron/pipeline (app.runtime.run_json)."""
    id: uuid.UUID
    trigger: str = Field(description="what started it: cron (the schedule), http, manual, worker, ...")
    stopReason: Literal[STOP_REASONS] | None = Field(
        description="why it stopped; null while it runs (or if it was killed before it could say)")
    jobsDone: int = Field(description="jobs of your stages it finished")
    jobsFailed: int = Field(description="jobs that ended failed: no attempt left, or failed for good")
    jobsRetried: int = Field(description="failed attempts that will be tried again after a backoff")
    jobsDeferred: int = Field(description="jobs handed back for later, their attempt not counted")
    quotaUnits: int = Field(description="shared quota units it spent")
    summary: dict[str, Any] = Field(description="stages: per stage {done, failed, retried, deferred}; "
                                                "counts: the handlers' own counters, by the names they gave")
    error: str | None
    startedAt: datetime
    finishedAt: datetime | None
    durationSeconds: float | None


class TriggeredRunOut(RunOut):
    budgetSeconds: float = Field(description="how long this run could claim: the request, capped by "
                                             "PIPELINE_BUDGET_SECONDS and, in Lambda, by the time left")


class RunPage(BaseModel):
    data: list[RunOut] = Field(description="newest first")
    nextCursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last")


@router.get("/runs", response_model=RunPage, summary="List runs, newest first", responses={200: CACHED},
            openapi_extra={"parameters": RUN_LIST.openapi()})
async def list_runs(request: Request) -> Response:
    """A keyset page of runs over (started_at, id), newest first. No total."""
    page = RUN_LIST.parse(request)

    async def build() -> dict[str, Any]:
        rows = await run_log.list_runs(await pool_of(request), stop_reason=page.filters["stop_reason"],
                                       trigger=page.filters["trigger"], after=page.after,
                                       limit=page.limit + 1)
        return page.answer(rows, run_json, lambda r: (r["started_at"], r["id"]))

    return await cached_json(request, build)


@router.get("/runs/{run_id}", response_model=RunOut, summary="One run",
            dependencies=[Depends(only_params())],
            responses={200: CACHED, 404: {"description": "no such run"}})
async def get_run(run_id: uuid.UUID, request: Request) -> Response:
    async def build() -> dict[str, Any]:
        row = await run_log.get_run(await pool_of(request), run_id)
        if row is None:
            raise ApiError(404, "not_found", f"no run {run_id}")
        return run_json(row)

    return await cached_json(request, build)
