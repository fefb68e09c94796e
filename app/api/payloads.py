"""Job payloads at the API's edge: the rules of app.pipeline.payloads (size, NUL, the
stage's declared model) as a 422 invalid_request naming each problem's place in the body."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from app.api.errors import invalid_request
from app.pipeline.payloads import PayloadRefused, check_payload
from app.pipeline.stage import Stage


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
