"""Batches over HTTP: the orchestrator (POST /lanes/{id}/batches), progress
(GET /batches/{id}) and cancel. Thin over app.engine.batches. A plug-in whose objects
are lanes mounts the orchestrator under its own path with create_batch_in_lane."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.json_numbers import JsonInt
from app.api.params import only_params
from app.api.payloads import accepted_job, accepted_payload, stage_of
from app.engine import batches as engine
from app.engine import job_admin
from app.engine.batches import BatchRequest, LaneNotFound
from app.engine.jobs import PRIORITY_MAX, PRIORITY_MIN
from app.json_values import iso
from app.pipeline import outcomes

router = APIRouter(tags=["batches"])

MAX_JOBS = 50
MAX_TOTAL = 1_000_000  # units of work a job may announce (the column is an int4)


class BatchCallbackIn(BaseModel):
    """A job to enqueue: its type and payload (a batch's callback as it is)."""
    model_config = ConfigDict(extra="forbid")
    type: str = Field(min_length=1, max_length=100, description="a stage's job type")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="a JSON object: what the stage declares for its type, at most MAX_PAYLOAD_BYTES of JSON, "
                    "no NUL character anywhere")


class BatchJobIn(BatchCallbackIn):
    total: StrictInt | None = Field(None, ge=0, le=MAX_TOTAL, description="expected units of work, for a progress bar")
    priority: JsonInt = Field(0, ge=PRIORITY_MIN, le=PRIORITY_MAX, strict=True,
                              description="its rank within the lane: higher is claimed first, then oldest (as "
                                          "POST /jobs's priority)")


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    jobs: list[BatchJobIn] = Field(min_length=1, max_length=MAX_JOBS)
    callback: BatchCallbackIn | None = Field(
        None, description="a job enqueued in the lane once, when the batch ends (completed, partially_failed, "
                          "failed, stopped or cancelled); its payload is the one given plus \"batch\": {\"id\", "
                          "\"status\"}, the batch's final status")


class BatchCreated(BaseModel):
    batchId: uuid.UUID
    created: dict[str, uuid.UUID] = Field(description="type -> the new job")
    skipped: dict[str, uuid.UUID] = Field(description="type -> the open job that made it a duplicate")


class BatchCounts(BaseModel):
    pending: int
    running: int
    done: int
    failed: int
    cancelled: int


class BatchJobOut(BaseModel):
    id: uuid.UUID
    type: str
    status: str
    attempts: int
    priority: int = Field(description="its rank within the lane: higher is claimed first")
    total: int | None
    progress: int | None
    lastError: str | None


class BatchOut(BaseModel):
    id: uuid.UUID
    lane: uuid.UUID
    status: str
    jobs: int
    counts: BatchCounts
    total: int | None = Field(description="summed expected units (null when no job gave one)")
    progress: int = Field(description="summed units done")
    createdAt: str
    finishedAt: str | None
    children: list[BatchJobOut]


def _known_types(request: Request) -> list[str]:
    return [s.type for s in request.app.state.runtime.stages]


CREATE_RESPONSES = {404: {"description": "no such lane (or not yours)"},
                    409: {"description": "ALL_DUPLICATE_JOBS: every requested type is in flight"},
                    422: {"description": "an unknown job type, job_refused (a job's stage will not have "
                                         "what its payload names), or a malformed body"}}


@router.post("/lanes/{lane_id}/batches", status_code=201, response_model=BatchCreated,
             dependencies=[Depends(only_params())], responses=CREATE_RESPONSES)
async def create_batch(lane_id: uuid.UUID, body: BatchIn, request: Request) -> JSONResponse:
    """One job per requested type, skipping types that already have an open job in the lane."""
    return await create_batch_in_lane(lane_id, body, request, "lane")


async def create_batch_in_lane(lane: uuid.UUID, body: BatchIn, request: Request, noun: str) -> JSONResponse:
    """The orchestrator: a batch of one job per requested type in the lane; `noun` names
    the lane in answers (a plug-in's word for it)."""
    known = _known_types(request)
    unknown = sorted({j.type for j in body.jobs} - set(known))
    if unknown:
        raise ApiError(422, "unknown_job_type",
                       f"unknown job type {unknown[0]!r}; the stages are: {', '.join(known)}",
                       {"unknown": unknown, "known": known})
    types = [j.type for j in body.jobs]
    twice = sorted({t for t in types if types.count(t) > 1})
    if twice:
        raise ApiError(422, "duplicate_job_type",
                       f"job type {twice[0]!r} is asked for more than once; a batch makes one job per type",
                       {"duplicates": twice})
    requests = [BatchRequest(j.type, accepted_payload(request, j.type, j.payload, ("body", "jobs", i, "payload")),
                             j.total, j.priority) for i, j in enumerate(body.jobs)]
    callback = body.callback and (body.callback.type, accepted_payload(request, body.callback.type,
                                                                       body.callback.payload,
                                                                       ("body", "callback", "payload")))
    db = await pool_of(request)
    no_lane = ApiError(404, "not_found", f"no {noun} {lane}")
    stages = [stage_of(request, r.type) for r in requests]
    if any(s.accepts for s in stages):
        # a lane not there (or not yours) is a 404 first, whatever its jobs name
        if await job_admin.visible_lane(db, lane) is None:
            raise no_lane
        for i, (stage, r) in enumerate(zip(stages, requests)):
            await accepted_job(db, stage, lane, r.payload, ("body", "jobs", i, "payload"))
    try:
        outcome = await engine.create_batch(db, lane, requests, callback=callback)
    except LaneNotFound:
        raise no_lane from None
    skipped = {t: str(i) for t, i in outcome.skipped.items()}
    if outcome.batch_id is None:
        raise ApiError(409, "ALL_DUPLICATE_JOBS",
                       f"every requested job type already has an open job in this {noun}",
                       {"openJobs": skipped})
    return JSONResponse(status_code=201, content={
        "batchId": str(outcome.batch_id),
        "created": {t: str(i) for t, i in outcome.created.items()},
        "skipped": skipped})


@router.get("/batches/{batch_id}", response_model=BatchOut, dependencies=[Depends(only_params())],
            responses={404: {"description": "no such batch"}})
async def get_batch(batch_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """Status, counts by job status and summed progress: enough to draw a progress bar."""
    pool = await pool_of(request)
    row = await engine.get_batch(pool, batch_id)
    if row is None:
        raise ApiError(404, "not_found", f"no batch {batch_id}")
    children = await engine.batch_jobs(pool, batch_id)
    return {
        "id": row["id"], "lane": row["lane"], "status": row["status"], "jobs": row["jobs"],
        "counts": {k: row[k] for k in ("pending", "running", "done", "failed", "cancelled")},
        "total": row["total"], "progress": row["progress"] or 0,
        "createdAt": iso(row["created_at"]), "finishedAt": iso(row["finished_at"]),
        "children": [{"id": c["id"], "type": c["type"], "status": c["status"], "attempts": c["attempts"],
                      "priority": c["priority"], "total": c["total"], "progress": c["progress"], "lastError": c["last_error"]}
                     for c in children],
    }


@router.post("/batches/{batch_id}/cancel", dependencies=[Depends(only_params())],
             responses={404: {"description": "no such batch"}, 409: {"description": "already finished"}})
async def cancel_batch(batch_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """Stop an open batch: its jobs that have not started are cancelled now, and its running
    ones are asked to stop: the run that holds each ends it cancelled within about 2 s."""
    pool = await pool_of(request)
    runtime = request.app.state.runtime
    done = await outcomes.cancel_batch(pool, runtime.stages, batch_id, runtime.settings)
    if not done.was_open:
        row = await engine.get_batch(pool, batch_id)
        if row is None:
            raise ApiError(404, "not_found", f"no batch {batch_id}")
        raise ApiError(409, "batch_finished", f"batch {batch_id} is already {row['status']}",
                       {"status": row["status"]})
    return {"id": str(batch_id), "status": "cancelled", "jobsCancelled": done.cancelled,
            "jobsStopping": done.requested}
