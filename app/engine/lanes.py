"""Lanes as people see them: list a page of them, rank one (priority, paused).

The queue makes a lane's row when its first job arrives; a plug-in (or psql) owns and
ranks lanes from its own data, and an operator may rank one by hand."""

from __future__ import annotations

import uuid

import asyncpg

from app.engine.queries import statement

PRIORITY_LIMIT = 1_000_000  # a hand-set priority lies within ± this


async def list_lanes(db, after: uuid.UUID | None, limit: int) -> list[asyncpg.Record]:
    """By id, strictly after the lane `after` when given."""
    return await db.fetch(*statement("lanes_list").bind(after=after, limit=limit))


async def rank_lane(db, lane: uuid.UUID, priority: int | None, paused: bool | None) -> asyncpg.Record | None:
    """The lane, now ranked (None leaves that part as it was); None when there is no such lane."""
    return await db.fetchrow(*statement("lane_rank").bind(lane=lane, priority=priority, paused=paused))


async def busiest_lanes(db, limit: int, own_only: bool) -> list[asyncpg.Record]:
    """The `limit` lanes with the most open work (pending + running), with their ranking.
    own_only: a tenant's, read lane by lane from its own lanes; else every lane's, pending
    jobs from the lane counters (an admin's)."""
    if own_only:
        return await db.fetch(*statement("dashboard_lanes").bind(limit=limit))
    return await db.fetch(*statement("dashboard_lanes_all").bind(limit=limit))
