"""The audit log: read newest first, and pruned by age (the triggers write it; no row is
ever changed)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.engine.queries import statement


async def audit_page(db, *, table: str | None, after: tuple[datetime, int] | None,
                     limit: int) -> list[asyncpg.Record]:
    """Newest first over (at, id)."""
    at, last_id = after if after else (None, None)
    return await db.fetch(*statement("audit_page").bind(at=at, last_id=last_id, table=table, limit=limit))


async def prune(db, retention_days: int, limit: int) -> int:
    """Delete at most `limit` audit rows older than `retention_days` days, oldest first."""
    return await db.fetchval(*statement("audit_prune").bind(retention_days=retention_days, limit=limit))
