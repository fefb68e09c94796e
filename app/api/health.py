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
from app.engine.migrate import pending_migrations

router = APIRouter()

READY_TIMEOUT_SECONDS = 5.0


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
                    pending = await pending_migrations(conn)
    except DatabaseUnavailable as exc:
        # readiness has its own code: probes look for not_ready, whatever the cause
        raise ApiError(503, "not_ready", str(exc), {"database": exc.state}) from None
    if pending:
        raise ApiError(503, "not_ready", f"{len(pending)} migration(s) not applied; run `python -m app migrate`",
                       {"database": "reachable", "pendingMigrations": pending})
    redis = await request.app.state.redis.status()
    return {"status": "ready", "database": "reachable", "pendingMigrations": [], "redis": redis}
