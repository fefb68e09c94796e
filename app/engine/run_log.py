"""Reading the runs log: a keyset page of invocations, newest first, or one of them."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from app.engine.queries import query


async def list_runs(db, *, stop_reason: str | None, trigger: str | None,
                    after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[asyncpg.Record]:
    """Newest first over (started_at, id); stop_reason 'running' means not finished yet."""
    at, last_id = after if after else (None, None)
    return await db.fetch(query("runs_list"), stop_reason, trigger, at, last_id, limit)


async def get_run(db, run_id: uuid.UUID) -> asyncpg.Record | None:
    return await db.fetchrow(query("run_get"), run_id)
