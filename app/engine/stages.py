"""Stages as an operator controls them: pause one for every lane, resume it, list the
paused ones. The claim takes nothing of a paused stage (sql/queries/claim.sql)."""

from __future__ import annotations

from datetime import datetime

from app.engine.queries import statement


async def pause_stage(db, type_: str) -> None:
    await db.execute(*statement("stage_pause").bind(type=type_))


async def resume_stage(db, type_: str) -> None:
    await db.execute(*statement("stage_resume").bind(type=type_))


async def paused_stages(db) -> dict[str, datetime]:
    """Each paused stage and when it was paused."""
    return {r["type"]: r["paused_at"] for r in await db.fetch(*statement("stages_paused").bind())}
