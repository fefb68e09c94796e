"""Liveness (the process answers) and readiness (Postgres reachable and migrated)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from app.api.errors import ApiError
from app.api.runtime import DATABASE_ERRORS, DatabaseNotConfigured, Runtime
from app.engine.migrate import pending_migrations

router = APIRouter()

READY_TIMEOUT_SECONDS = 5.0


@router.get("/health/live")
async def live() -> dict[str, Any]:
    return {"status": "live"}


@router.get("/health/ready")
async def ready(request: Request) -> dict[str, Any]:
    runtime: Runtime = request.app.state.runtime
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS):
            pool = await runtime.pool()
            async with pool.acquire() as conn:
                pending = await pending_migrations(conn)
    except DatabaseNotConfigured as exc:
        raise ApiError(503, "not_ready", str(exc), {"database": "not configured"}) from None
    except DATABASE_ERRORS as exc:
        raise ApiError(503, "not_ready", f"the database is not reachable: {type(exc).__name__}",
                       {"database": "unreachable"}) from None
    if pending:
        raise ApiError(503, "not_ready", f"{len(pending)} migration(s) not applied; run `python -m app migrate`",
                       {"database": "reachable", "pendingMigrations": pending})
    return {"status": "ready", "database": "reachable", "pendingMigrations": []}
