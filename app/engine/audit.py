"""Reading the audit log (the triggers write it; nothing here can)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.engine.queries import query


async def audit_page(db, *, table: str | None, after: tuple[datetime, int] | None,
                     limit: int) -> list[asyncpg.Record]:
    """Newest first over (at, id)."""
    at, last_id = after if after else (None, None)
    return await db.fetch(query("audit_page"), at, last_id, table, limit)
