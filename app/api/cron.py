"""GET/POST /cron/pipeline: run the pipeline once, inside the budget, and return the run.

Called by the schedule (through the Lambda handler), by a manual `curl`, and by
anything else that can send `Authorization: Bearer <CRON_SECRET>`. A run started here
is recorded as `http` (a person's: it may spend the quota reserve), unless the caller
says it is the schedule with `X-Skiplock-Trigger: cron`: then it is recorded as `cron`
and keeps cron's rules. Only a caller that passed the cron secret gets this far, and
the header can only give up the reserve, never gain anything."""

from __future__ import annotations

import hmac
import math
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from app.api.bearer import bearer_token, challenge
from app.api.errors import ApiError
from app.api.runs import TriggeredRunOut
from app.runtime import Runtime, remaining_seconds, run_json

router = APIRouter()

ALLOWED_PARAMS = {"budget"}
TRIGGER_HEADER = "x-skiplock-trigger"
TRIGGERS = ("cron", "http")  # what the header may say; without it: http


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def require_cron_secret(request: Request) -> None:
    """Bearer CRON_SECRET, compared in constant time. Runs before anything else."""
    settings = get_runtime(request).settings
    secret = settings.cron_secret.get_secret_value() if settings.cron_secret else None
    if secret is None:
        if settings.local_dev:
            return
        raise ApiError(503, "cron_secret_not_configured",
                       "CRON_SECRET is not set, so the cron route is disabled; set it "
                       "(or LOCAL_DEV=1 on your own machine)")
    token = bearer_token(request, "cron", "<CRON_SECRET>")
    if not hmac.compare_digest(token.encode(), secret.encode()):
        raise ApiError(401, "unauthorized", "wrong cron secret", headers=challenge("cron"))


def _budget(request: Request, raw: str | None) -> float | None:
    unknown = sorted(set(request.query_params) - ALLOWED_PARAMS)
    if unknown:
        raise ApiError(400, "unknown_parameter",
                       f"unknown query parameter {unknown[0]!r}; the only one is 'budget' (seconds)",
                       {"unknown": unknown, "allowed": sorted(ALLOWED_PARAMS)})
    if len(request.query_params.getlist("budget")) > 1:
        raise ApiError(400, "bad_request", "give 'budget' at most once")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ApiError(422, "invalid_budget",
                       f"budget must be a positive number of seconds, like ?budget=30 (got {raw[:40]!r})",
                       {"parameter": "budget"})
    return value


def _trigger(request: Request) -> str:
    said = request.headers.getlist(TRIGGER_HEADER)
    if len(said) > 1:
        raise ApiError(400, "bad_request", "give the X-Skiplock-Trigger header at most once")
    if not said:
        return "http"
    trigger = said[0].strip().lower()
    if trigger not in TRIGGERS:
        raise ApiError(400, "invalid_trigger",
                       f"X-Skiplock-Trigger must be 'cron' (a scheduler) or 'http' (got {said[0][:40]!r})",
                       {"header": "X-Skiplock-Trigger", "allowed": list(TRIGGERS)})
    return trigger


async def _run(request: Request, budget: str | None) -> JSONResponse:
    requested = _budget(request, budget)
    trigger = _trigger(request)
    # in Lambda (through Mangum) the invocation's context rides in the scope
    remaining = remaining_seconds(request.scope.get("aws.context"))
    result = await get_runtime(request).run(trigger, requested, remaining)
    body = run_json(result.row, result.budget_seconds)
    if result.database_lost:  # recorded, but cut short by the database, not by the work
        raise ApiError(503, "database_unavailable",
                       f"the run lost its database connection and stopped: {result.error}", body)
    if result.stop_reason == "error":
        raise ApiError(500, "run_failed", f"the run stopped on an error: {result.error}", body)
    return JSONResponse(body)  # as run_json wrote it, like GET /runs/{id}


_BUDGET = Query(None, description="seconds to keep claiming; capped by PIPELINE_BUDGET_SECONDS")
_SUMMARY = "Run the pipeline once and return the run"


@router.post("/cron/pipeline", dependencies=[Depends(require_cron_secret)], summary=_SUMMARY,
             response_model=TriggeredRunOut)
async def run_post(request: Request, budget: str | None = _BUDGET) -> JSONResponse:
    return await _run(request, budget)


@router.get("/cron/pipeline", dependencies=[Depends(require_cron_secret)], summary=_SUMMARY,
            response_model=TriggeredRunOut)
async def run_get(request: Request, budget: str | None = _BUDGET) -> JSONResponse:
    return await _run(request, budget)
