"""The runs log: one row per pipeline invocation."""

from __future__ import annotations

import uuid
from typing import Any

from app.engine.queries import query


async def start_run(db, trigger: str) -> uuid.UUID:
    row = await db.fetchrow(query("run_start"), trigger)
    return row["id"]


async def finish_run(db, run_id: uuid.UUID, *, stop_reason: str, done: int, failed: int,
                     deferred: int, units: int, summary: dict[str, Any], error: str | None):
    return await db.fetchrow(query("run_finish"), run_id, stop_reason, done, failed, deferred,
                             units, summary, error)


async def close_abandoned_runs(db, older_than_seconds: float) -> list[uuid.UUID]:
    rows = await db.fetch(query("close_abandoned_runs"), float(older_than_seconds))
    return [r["id"] for r in rows]
