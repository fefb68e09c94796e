"""Job payloads at the API's edge: the rules of app.pipeline.payloads (size, NUL, the
stage's declared model) as a 422 invalid_request naming each problem's place in the body,
and the stage's own say on what the payload names (Stage.accepts) as a 422 job_refused."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Request

from app.api.errors import ApiError, invalid_request
from app.pipeline.payloads import PayloadRefused, check_payload
from app.pipeline.stage import JobRefused, Stage


def stage_of(request: Request, job_type: str) -> Stage | None:
    return next((s for s in request.app.state.runtime.stages if s.type == job_type), None)


def accepted_payload(request: Request, job_type: str, payload: dict[str, Any],
                     where: tuple[str | int, ...]) -> dict[str, Any]:
    """The payload to store for a job of `job_type`; `where` is the payload's place in
    the request body, like ("body", "payload")."""
    runtime = request.app.state.runtime
    stage = stage_of(request, job_type)
    try:
        return check_payload(payload, stage.payload if stage else None,
                             max_bytes=runtime.settings.max_payload_bytes,
                             context={"settings": runtime.settings})
    except PayloadRefused as refused:
        raise invalid_request([(where + p.location, p.message) for p in refused.problems]) from None


async def accepted_job(db, stage: Stage, lane: uuid.UUID, payload: dict[str, Any],
                       where: tuple[str | int, ...]) -> None:
    """The stage's `accepts` on the request's own connection (as its tenant: row-level
    security applies), or a 422 job_refused with the hook's message; `where` is the
    payload's place in the body."""
    try:
        await stage.people_accept(db, lane, payload)
    except JobRefused as exc:
        raise ApiError(422, "job_refused", str(exc),
                       {"location": ".".join(str(w) for w in where), **(exc.details or {})}) from None
