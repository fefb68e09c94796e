"""GET /jobs/{id}/timeline: one job's story, from what PostgreSQL already keeps.

The job row says when it was enqueued, its current (or last) claim and its ending; its
`errors` list says when each failed attempt ended and in which run; the audit log (for
an admin: the log is the operator's) says who enqueued, retried or cancelled it. Nothing
is recorded for the timeline's sake, so an earlier attempt's claim shows only through
the run that held it and the error it ended with."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.jobs import JobOut
from app.api.params import only_params
from app.engine import job_admin
from app.engine.queries import statement
from app.json_values import iso
from app.runtime import job_json

router = APIRouter(tags=["jobs"])

AUDIT_SHOWN = 50


class Moment(BaseModel):
    at: datetime
    kind: Literal["enqueued", "claimed", "attempt_failed", "due", "done", "failed", "cancelled", "changed"]
    attempt: int | None = Field(None, description="the attempt it concerns")
    runId: uuid.UUID | None = Field(None, description="the run that held the job")
    actor: str | None = Field(None, description="who, for what a person did ('admin <id>', 'user <id>', ...)")
    text: str | None = Field(None, description="the error, or what changed")


class JobTimeline(BaseModel):
    job: JobOut
    timeline: list[Moment] = Field(description="oldest first")


def _moments(job: dict[str, Any], changes) -> list[dict[str, Any]]:
    moments: list[dict[str, Any]] = [{"at": job["createdAt"], "kind": "enqueued"}]
    for e in reversed(job.get("errors") or []):  # stored newest first
        moments.append({"at": e.get("at"), "kind": "attempt_failed", "attempt": e.get("attempt"),
                        "runId": e.get("runId"), "text": e.get("error")})
    if job["lockedAt"]:
        moments.append({"at": job["lockedAt"], "kind": "claimed", "attempt": job["attempts"], "runId": job["runId"]})
    if job["finishedAt"] and job["status"] in ("done", "failed", "cancelled"):
        cancelled = job["status"] == "cancelled" or job["lastError"] == "cancelled"
        moments.append({"at": job["finishedAt"], "kind": "cancelled" if cancelled else job["status"],
                        "text": None if job["status"] == "done" or cancelled else job["lastError"]})
    if job["status"] == "pending":
        moments.append({"at": job["runAfter"], "kind": "due", "attempt": job["attempts"] + 1})
    for c in changes:
        what = ("enqueued" if c["op"] == "INSERT" else
                f"{c['old_status']} → {c['new_status']}" if c["old_status"] != c["new_status"] else "changed")
        moments.append({"at": iso(c["at"]), "kind": "changed", "actor": f"{c['actor_kind']} {c['actor_id'] or ''}".strip(),
                        "text": what})
    moments.sort(key=lambda m: _instant(m["at"]))
    return moments


def _instant(at: str | None) -> datetime:
    """For ordering: the errors list's times are PostgreSQL's text, in the session's zone."""
    return datetime.fromisoformat(at) if at else datetime.min.replace(tzinfo=timezone.utc)


@router.get("/jobs/{job_id}/timeline", response_model=JobTimeline, summary="One job and its story",
            dependencies=[Depends(only_params())], responses={404: {"description": "no such job"}})
async def job_timeline(job_id: uuid.UUID, request: Request) -> JSONResponse:
    """The job (as GET /jobs/{id}) and its moments, oldest first: enqueued, each failed
    attempt (when, which run, the error), its current or last claim, its ending or when
    it is due next, and, for an admin key, what people did to it (the audit log's last
    50 changes: who, and the status before and after)."""
    db = await pool_of(request)
    row = await job_admin.get_job(db, job_id)
    if row is None:
        raise ApiError(404, "not_found", f"no job {job_id}")
    job = job_json(row)
    changes = (await db.fetch(*statement("dashboard_job_audit").bind(job_id=job_id, limit=AUDIT_SHOWN))
               if request.state.actor.is_admin else [])
    return JSONResponse({"job": job, "timeline": _moments(job, changes)}, headers={"Cache-Control": "no-store"})
