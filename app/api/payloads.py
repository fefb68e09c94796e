"""Job payloads at the API's edge: app.pipeline.admission's refusals said as the API's
errors, each payload problem at its place in the request body."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Request

from app.api.errors import ApiError, invalid_request
from app.pipeline import admission
from app.pipeline.stage import Stage


def not_admitted(refused: admission.NotAdmitted, where: tuple[str | int, ...]) -> ApiError:
    """The API's answer to a refusal; `where` is the payload's place in the body, like
    ("body", "payload")."""
    if refused.problems is not None:
        return invalid_request([(where + location, message) for location, message in refused.problems])
    details = refused.details
    if refused.code == "job_refused":
        details = {"location": ".".join(str(w) for w in where), **details}
    return ApiError(refused.status, refused.code, refused.message, details)


def stage_of(request: Request, job_type: str) -> Stage:
    try:
        return admission.stage_for(request.app.state.runtime.stages, job_type)
    except admission.NotAdmitted as refused:
        raise not_admitted(refused, ()) from None


def accepted_payload(request: Request, job_type: str, payload: dict[str, Any],
                     where: tuple[str | int, ...]) -> dict[str, Any]:
    """The payload to store for a job of `job_type` (admission.checked_payload)."""
    try:
        return admission.checked_payload(stage_of(request, job_type), payload, request.app.state.runtime.settings)
    except admission.NotAdmitted as refused:
        raise not_admitted(refused, where) from None


async def accepted_job(db, stage: Stage, lane: uuid.UUID, payload: dict[str, Any],
                       where: tuple[str | int, ...]) -> None:
    """The stage's `accepts` on the request's own connection (as its tenant: row-level
    security applies), or a 422 job_refused with the hook's message."""
    try:
        await admission.accepted(db, stage, lane, payload)
    except admission.NotAdmitted as refused:
        raise not_admitted(refused, where) from None
