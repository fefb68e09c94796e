"""GET /trends: each stage's jobs done and failed and their wait from due to start, and the
runs by stop reason, over the last hour or day in buckets. A tenant's come from its own
lanes (row-level security as everywhere; runs are the operator's, so a tenant's are empty)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.pagination import single
from app.api.params import only_params
from app.engine import trends

router = APIRouter(tags=["dashboard"])

WINDOW_PARAM = {"name": "window", "in": "query", "required": False,
                "description": "hour (60 buckets of a minute, the default) or day (48 of 30 minutes)",
                "schema": {"type": "string", "enum": list(trends.WINDOWS), "default": "hour"}}


class TrendPoint(BaseModel):
    at: datetime = Field(description="the bucket's start")
    done: int = Field(description="jobs that ended done in the bucket")
    failed: int = Field(description="jobs that ended failed in the bucket (a cancel is not counted)")
    waitP50Seconds: float | None = Field(description="median wait of their last attempt, due to claimed; "
                                                     "null when none ended")
    waitP95Seconds: float | None = Field(description="95th percentile of the same wait")


class StageTrend(BaseModel):
    type: str
    done: int = Field(description="over the whole window")
    failed: int
    points: list[TrendPoint] = Field(description="one per bucket, oldest first, empty ones included")


class RunTrendPoint(BaseModel):
    at: datetime
    counts: dict[str, int] = Field(description="finished runs started in the bucket, per stop reason")


class TrendsOut(BaseModel):
    window: str
    bucketSeconds: int
    since: datetime = Field(description="the first bucket's start")
    stages: list[StageTrend] = Field(description="the stages that ended any job in the window, by type")
    runs: list[RunTrendPoint] = Field(description="one per bucket; empty counts for a tenant (runs are the "
                                                  "operator's)")


@router.get("/trends", response_model=TrendsOut, summary="Jobs done, failed and waited per stage over time",
            responses={400: {"description": "an unknown window or parameter"}},
            openapi_extra={"parameters": [WINDOW_PARAM]})
async def get_trends(request: Request) -> JSONResponse:
    """Per stage, per bucket: jobs that ended done and failed, and the wait of their last
    attempt from due to claimed (p50, p95); runs per bucket by stop reason. Read from the
    jobs' own timestamps and the runs rows, bounded by the window (an admin's off
    jobs_finished_idx, a tenant's off its own lanes)."""
    only_params("window")(request)
    name = single(request, "window") or "hour"
    window = trends.WINDOWS.get(name)
    if window is None:
        raise ApiError(400, "invalid_parameter", f"window: must be one of {', '.join(trends.WINDOWS)} "
                                                 f"(got {name[:40]!r})", {"parameter": "window"})
    db = await pool_of(request)
    starts = trends.bucket_starts(window, datetime.now(timezone.utc))
    return JSONResponse({
        "window": window.name, "bucketSeconds": window.bucket_seconds, "since": starts[0].isoformat(),
        "stages": await trends.stage_trends(db, window, starts, own_lanes=not request.state.actor.is_admin),
        "runs": await trends.run_trends(db, window, starts),
    }, headers={"Cache-Control": "no-store"})
