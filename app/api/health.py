"""Liveness (the process answers) and readiness (Postgres reachable and migrated).

Redis is reported, never required: readiness says "redis": "ok", "degraded" (set but not
answering: no rate limits, no cache) or "not configured", and stays 200 on Postgres alone.
Failing readiness for a cache would take every healthy instance out of rotation at once."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request

from app.api.errors import ApiError
from app.api.params import only_params
from app.runtime import DatabaseUnavailable, Runtime, database_errors
from app.engine import queue_stats
from app.engine.migrate import pending_migrations

router = APIRouter()

READY_TIMEOUT_SECONDS = 5.0
# Every run enqueues the ticks that are due, and runs start at least every five minutes
# (the schedule; a worker's runs last the budget): three missed schedules is overdue.
MAINTENANCE_OVERDUE_SECONDS = 900.0


@router.get("/health/live", dependencies=[Depends(only_params())])
async def live() -> dict[str, Any]:
    return {"status": "live"}


@router.get("/health/ready", dependencies=[Depends(only_params())])
async def ready(request: Request) -> dict[str, Any]:
    runtime: Runtime = request.app.state.runtime
    try:
        with database_errors():  # the timeout below leaves as TimeoutError, one of those errors
            async with asyncio.timeout(READY_TIMEOUT_SECONDS):
                pool = await runtime.pool()
                async with pool.acquire() as conn:
                    pending = await pending_migrations(conn, runtime.plugins)
    except DatabaseUnavailable as exc:
        # readiness has its own code: probes look for not_ready, whatever the cause
        raise ApiError(503, "not_ready", str(exc), {"database": exc.state}) from None
    if pending:
        raise ApiError(503, "not_ready", f"{len(pending)} migration(s) not applied; run `skiplock migrate`",
                       {"database": "reachable", "pendingMigrations": pending})
    if runtime.settings.tenant_database_url:
        try:
            async with asyncio.timeout(READY_TIMEOUT_SECONDS):
                await runtime.tenant_pool()  # opened once, and its login checked
        except (DatabaseUnavailable, TimeoutError) as exc:
            state = exc.state if isinstance(exc, DatabaseUnavailable) else "unreachable"
            raise ApiError(503, "not_ready", str(exc) or "the tenant login did not answer in time",
                           {"database": "reachable", "tenantLogin": state}) from None
    with database_errors():
        maintenance = await maintenance_state(pool, runtime.settings.run_scheduler)
    redis = await request.app.state.redis.status()
    return {"status": "ready", "database": "reachable", "pendingMigrations": [], "redis": redis,
            "maintenance": maintenance}


async def maintenance_state(pool, scheduled_here: bool) -> dict[str, Any]:
    """Whether some deployment enqueues the recurring maintenance (the stuck sweep, the
    served-count expiry, pruning): known from the age of the last tick in the database,
    since RUN_SCHEDULER may be on elsewhere. Reported, never failed on: the API serves
    fine without it, and failing every instance's readiness would take the API down."""
    age = await queue_stats.last_maintenance_tick(pool)
    state = "ok" if age is not None and age <= MAINTENANCE_OVERDUE_SECONDS else "overdue"
    out: dict[str, Any] = {"state": state, "lastTickSecondsAgo": None if age is None else round(age),
                           "scheduledHere": scheduled_here}
    if state == "overdue":
        since = "yet" if age is None else f"for {age / 60:.0f} minutes"
        out["message"] = (f"no deployment has enqueued the recurring maintenance {since}: stuck jobs are not "
                          "given up and served counts do not expire. "
                          + ("Runs have stopped starting here: check the schedule or the worker."
                             if scheduled_here else "RUN_SCHEDULER is off here: turn it on in one deployment."))
    return out
