"""Acting on many jobs at once: POST /jobs/bulk/retry and POST /jobs/bulk/cancel.

Each names its jobs by id or by the filters GET /jobs takes, at most BULK_MAX a request,
and does to each what the one-job route does (POST /jobs/{id}/retry, /cancel), with the
same checks, in the request's tenant transaction: row-level security keeps a tenant to
its own jobs, and the jobs trigger audits every change as the one-job routes' are."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, create_model

from app.api.cache import forget
from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.jobs import JOB_LIST, STATUSES
from app.api.params import only_params
from app.engine import job_admin
from app.pipeline import admission, outcomes

router = APIRouter(tags=["jobs"])

BULK_MAX = 500
# The statuses each action applies to: a filter names one of them, or means the first.
ACTS_ON = {action: tuple(s for s in statuses if s in STATUSES)
           for action, statuses in (("retry", ("failed", "cancelled")),
                                    ("cancel", ("pending", "running", "waiting")))}


# GET /jobs's filters as a body's fields: the same names, descriptions and schemas, parsed
# by the same code (a bad value: 422 invalid_filter).
BulkFilter = create_model(
    "BulkFilter", __config__=ConfigDict(extra="forbid"),
    **{p.name: (str, Field(None, description=p.description, json_schema_extra={
        k: v for k, v in p.schema.items() if k != "type"})) for p in JOB_LIST.filters})


class _Bulk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dry_run: StrictBool = Field(False, description="say what would be acted on, change nothing")


class BulkByIds(_Bulk):
    ids: list[uuid.UUID] = Field(min_length=1, max_length=BULK_MAX, description=f"the jobs (1 to {BULK_MAX})")


class BulkByFilter(_Bulk):
    filter: BulkFilter = Field(  # type: ignore[valid-type]
        description="GET /jobs's filters; the newest matching jobs the action applies to (retry: failed or "
                    f"cancelled, else the filter's status; cancel: pending, or running or waiting), at most "
                    f"{BULK_MAX}: `more` says whether others match")


BulkIn = BulkByIds | BulkByFilter


class Skipped(BaseModel):
    id: uuid.UUID
    code: str = Field(description="why it was left as it was: the one-job route's error code (not_found, "
                                  "job_not_failed, dedupe_key_taken, job_running, job_finished, ...)")
    message: str


class BulkOut(BaseModel):
    action: Literal["retry", "cancel"]
    dryRun: bool
    matched: int = Field(description="jobs named (ids) or found by the filter, at most the limit")
    more: bool = Field(description="the filter matches more than the limit: act again for the rest")
    limit: int = Field(description=f"at most this many jobs a request ({BULK_MAX})")
    changed: list[uuid.UUID] = Field(description="the jobs retried or cancelled (dry run: that would be tried)")
    skipped: list[Skipped]


def _filter(request: Request, action: str, raw: dict[str, str]) -> job_admin.JobFilter | None:
    """The filter as GET /jobs parses it, narrowed to a status the action changes; None when
    the filter names another status (nothing the action can change matches it)."""
    values: dict[str, Any] = {}
    for p in JOB_LIST.filters:
        try:
            values[p.name] = None if p.name not in raw else p.parse(raw[p.name], request)
        except ValueError as exc:
            raise ApiError(422, "invalid_filter", f"{p.name}: {exc}", {"filter": p.name}) from None
    statuses = ACTS_ON[action]
    if values["status"] is not None and values["status"] not in statuses:
        return None
    return job_admin.JobFilter(values["status"] or statuses[0], values["type"], values["lane"],
                               values["batch_id"], values["since"], values["until"], values["error"])


async def _targets(request: Request, action: str, body: BulkIn) -> tuple[list[uuid.UUID], bool]:
    if isinstance(body, BulkByIds):
        return list(dict.fromkeys(body.ids)), False
    where = _filter(request, action, body.filter.model_dump(exclude_none=True))
    if where is None:
        return [], False
    rows = await job_admin.list_jobs(await pool_of(request), where, None, BULK_MAX + 1,
                                     own_lanes=not request.state.actor.is_admin)
    return [r["id"] for r in rows[:BULK_MAX]], len(rows) > BULK_MAX


async def _retry_one(request: Request, db, job_id: uuid.UUID) -> tuple[str, str] | None:
    """None when retried, else (code, message) as POST /jobs/{id}/retry would answer."""
    try:
        await admission.retry_admitted(db, request.app.state.runtime.stages, job_id)
        row = await job_admin.retry_job(db, job_id)
    except admission.NotAdmitted as refused:
        return refused.code, refused.message
    except job_admin.DedupeKeyTaken:
        return "dedupe_key_taken", "another open job has this job's dedupe key"
    if row is not None:
        return None
    current = await job_admin.get_job(db, job_id)
    if current is None:
        return "not_found", f"no job {job_id}"
    return "job_not_failed", f"job {job_id} is {current['status']}; only a failed job can be retried"


async def _cancel_one(request: Request, db, job_id: uuid.UUID) -> tuple[str, str] | None:
    """None when cancelled, else (code, message) as POST /jobs/{id}/cancel would answer."""
    runtime = request.app.state.runtime
    try:
        row = await outcomes.cancel_job(db, runtime.stages, job_id, runtime.settings)
    except outcomes.HookFailed as failed:
        return "hook_failed", failed.public_message
    if row is not None:
        return None
    current = await job_admin.get_job(db, job_id)
    if current is None:
        return "not_found", f"no job {job_id}"
    if current["status"] == "running":
        return "job_running", f"job {job_id} is running; it ends when its holder finishes"
    return "job_finished", f"job {job_id} has already finished ({current['status']})"


async def _room_for_retries(request: Request, db) -> int | None:
    """How many more jobs a tenant's key may make wait (TENANT_WAITING_JOBS_MAX, as POST
    /jobs/{id}/retry counts it); None: no limit."""
    most = request.app.state.runtime.settings.tenant_waiting_jobs_max
    if not most or request.state.actor.is_admin:
        return None
    return max(0, most - await job_admin.waiting_in_own_lanes(db))


async def _act(request: Request, action: Literal["retry", "cancel"], body: BulkIn) -> JSONResponse:
    db = await pool_of(request)
    targets, more = await _targets(request, action, body)
    changed: list[str] = []
    skipped: list[dict[str, str]] = []
    room = await _room_for_retries(request, db) if action == "retry" and not body.dry_run else None
    for job_id in targets:
        if body.dry_run:
            changed.append(str(job_id))
            continue
        if room is not None and len(changed) >= room:
            skipped.append({"id": str(job_id), "code": "waiting_jobs_limit",
                            "message": "TENANT_WAITING_JOBS_MAX jobs of this account are waiting"})
            continue
        refused = await (_retry_one if action == "retry" else _cancel_one)(request, db, job_id)
        if refused is None:
            changed.append(str(job_id))
            await forget(request, f"/jobs/{job_id}")
        else:
            skipped.append({"id": str(job_id), "code": refused[0], "message": refused[1]})
    return JSONResponse({"action": action, "dryRun": body.dry_run, "matched": len(targets), "more": more,
                         "limit": BULK_MAX, "changed": changed, "skipped": skipped})


_ANSWERS = {422: {"description": "a malformed body (neither or both of ids and filter, more than "
                                 f"{BULK_MAX} ids, an unknown filter) or invalid_filter (a filter's value "
                                 "is not one GET /jobs takes)"}}


@router.post("/jobs/bulk/retry", response_model=BulkOut, summary=f"Retry many failed jobs (at most {BULK_MAX})",
             dependencies=[Depends(only_params())], responses=_ANSWERS)
async def retry_jobs(body: BulkIn, request: Request) -> JSONResponse:
    """Each failed job named back to pending, as POST /jobs/{id}/retry does it; the others
    are listed in `skipped` with the code that route answers. A tenant's key retries while
    fewer than TENANT_WAITING_JOBS_MAX of its jobs wait (the rest: waiting_jobs_limit)."""
    return await _act(request, "retry", body)


@router.post("/jobs/bulk/cancel", response_model=BulkOut, summary=f"Cancel many jobs (at most {BULK_MAX})",
             dependencies=[Depends(only_params())], responses=_ANSWERS)
async def cancel_jobs(body: BulkIn, request: Request) -> JSONResponse:
    """Each job named cancelled as POST /jobs/{id}/cancel does it (its stage's `cancelled`
    hook runs); the others are listed in `skipped` with that route's code."""
    return await _act(request, "cancel", body)
