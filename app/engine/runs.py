"""The runs log: one row per pipeline invocation, written by the pipeline and read by
the API (a keyset page of runs, newest first, or one of them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

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


async def list_runs(db, *, stop_reason: str | None, trigger: str | None,
                    after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[asyncpg.Record]:
    """Newest first over (started_at, id); stop_reason 'running' means not finished yet."""
    at, last_id = after if after else (None, None)
    return await db.fetch(query("runs_list"), stop_reason, trigger, at, last_id, limit)


async def get_run(db, run_id: uuid.UUID) -> asyncpg.Record | None:
    return await db.fetchrow(query("run_get"), run_id)
