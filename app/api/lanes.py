"""Lanes over HTTP: GET /lanes (a tenant's own, an admin's every lane) and, for operators,
PATCH /lanes/{id} to set a lane's priority or pause it. Thin over app.engine.lanes.

A plug-in that ranks lanes from its own data (the outreach example does) writes them
again when that data changes: a hand-set rank lasts until then."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.auth import require_admin
from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.json_numbers import JsonInt
from app.api.pagination import ListQuery
from app.api.params import only_params
from app.engine import lanes as engine
from app.engine.lanes import PRIORITY_LIMIT
from app.json_values import lane_json

router = APIRouter(tags=["lanes"])

LANE_LIST = ListQuery("lanes")
# Lanes are paged by id alone; the cursor's time is a constant.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class LaneOut(BaseModel):
    id: uuid.UUID
    ownerId: uuid.UUID | None = Field(description="whose work it is; null: nobody's (admins only)")
    priority: int = Field(description="higher is claimed first")
    paused: bool = Field(description="nothing of a paused lane is claimed, stale leases included")


class LanePage(BaseModel):
    data: list[LaneOut] = Field(description="by id")
    nextCursor: str | None = Field(description="pass as ?cursor= for the next page; null on the last")


class LaneRank(BaseModel):
    """Either or both; what is left out stays as it is. Strict: a JSON integer and a JSON
    boolean, as the schema says (no "true" or 1 for a boolean)."""
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"minProperties": 1})
    priority: JsonInt = Field(None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT,  # type: ignore[assignment]
                          description="higher is claimed first")
    paused: bool = Field(None, description="true: claim nothing of this lane until it is resumed")  # type: ignore[assignment]

    @model_validator(mode="after")
    def _something(self) -> "LaneRank":
        if not self.model_fields_set:
            raise ValueError("give priority, paused or both")
        return self


@router.get("/lanes", response_model=LanePage, summary="List lanes",
            openapi_extra={"parameters": LANE_LIST.openapi()})
async def list_lanes(request: Request) -> dict[str, Any]:
    """A keyset page of lanes by id: a tenant's own, or every lane for an admin key."""
    page = LANE_LIST.parse(request)
    rows = await engine.list_lanes(await pool_of(request), page.after[1] if page.after else None,
                                   page.limit + 1)
    return page.answer(rows, lane_json, lambda r: (EPOCH, r["id"]))


@router.patch("/lanes/{lane_id}", response_model=LaneOut, summary="Rank a lane (operators)",
              dependencies=[Depends(require_admin), Depends(only_params())],
              responses={403: {"description": "not an admin key"}, 404: {"description": "no such lane"}})
async def rank_lane(lane_id: uuid.UUID, body: LaneRank, request: Request) -> dict[str, Any]:
    """Set a lane's priority, pause it or resume it; the next claim sees it."""
    row = await engine.rank_lane(await pool_of(request), lane_id, body.priority, body.paused)
    if row is None:
        raise ApiError(404, "not_found", f"no lane {lane_id}")
    return lane_json(row)
