"""How a value read from PostgreSQL is written in JSON, everywhere the project writes it
(the API, the dashboard, the CLI's --json, a plug-in's own shapes): one module with no
imports of its own, so the scheduled path and the CLI can use it without the web stack."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The one error shape of every answer that is not a success (app/api/errors.py)."""
    return {"error": {"code": code, "message": message, "details": details}}


def iso(value: datetime | None) -> str | None:
    """A timestamp as ISO 8601 with its offset; an absent one as null."""
    return value.isoformat() if value is not None else None


def lane_json(row: Any) -> dict[str, Any]:
    """A lane as GET /lanes, PATCH /lanes/{id} and `skiplock lanes` show it."""
    return {"id": str(row["id"]), "ownerId": str(row["owner_id"]) if row["owner_id"] else None,
            "priority": row["priority"], "paused": row["paused"]}


def stage_json(stage: Any, paused: dict[str, datetime]) -> dict[str, Any]:
    """A stage as GET /stages, PATCH /stages/{type} and `skiplock stages` show it; `paused`:
    each paused stage's time (app.engine.stages.paused_stages)."""
    return {"type": stage.type, "batch": stage.batch, "concurrency": stage.concurrency,
            "leaseSeconds": stage.lease, "maxAttempts": stage.max_attempts,
            **stage_limits_json(stage), "paused": stage.type in paused, "pausedAt": iso(paused.get(stage.type))}


def stage_limits_json(stage: Any) -> dict[str, Any]:
    """A stage's limits across every run, as GET /stages and `skiplock status` show them."""
    rate = stage.rate and {"starts": stage.rate.starts, "perSeconds": stage.rate.per_seconds}
    return {"globalConcurrency": stage.global_concurrency, "rate": rate, "limitBy": stage.limit_by}
