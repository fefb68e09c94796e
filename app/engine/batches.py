"""Batches: a person's request for a set of work in one lane, and its status derived
from its children."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.engine.jobs import Job, NewJob, enqueue_many_rows
from app.engine.queries import statement


class LaneNotFound(Exception):
    """No such lane, or not the caller's (row-level security hides it): the same answer."""


@dataclass
class BatchRequest:
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    total: int | None = None
    priority: int = 0  # within the lane: higher is claimed first


@dataclass
class BatchOutcome:
    batch_id: uuid.UUID | None            # None: every requested type was already in flight
    created: dict[str, uuid.UUID]         # type -> new job id
    skipped: dict[str, uuid.UUID]         # type -> the open job that made it a duplicate


async def create_batch(pool, lane: uuid.UUID, requests: list[BatchRequest],
                       callback: tuple[str, dict[str, Any]] | None = None) -> BatchOutcome:
    """One job per requested type, skipping types with an open job in the lane. The lane
    must exist and be visible to the caller (LaneNotFound). `callback`, (type, payload):
    a job enqueued in the lane once the batch ends, told its final status (migration 0046).

    Requests for one lane are serialised by an advisory lock, so two identical
    requests at once create one set of jobs."""
    by_type: dict[str, BatchRequest] = {}
    for r in requests:
        by_type.setdefault(r.type, r)  # one job per type: the first asked wins
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(*statement("lane_lock").bind(lane=lane))
        if await conn.fetchval(*statement("lane_visible").bind(lane=lane)) is None:
            raise LaneNotFound(lane)
        open_rows = await conn.fetch(*statement("open_jobs_of_types").bind(lane=lane, types=list(by_type)))
        skipped = {r["type"]: r["id"] for r in open_rows}
        wanted = [r for t, r in by_type.items() if t not in skipped]
        if not wanted:
            return BatchOutcome(None, {}, skipped)
        batch_id = await conn.fetchval(*statement("batch_insert").bind(lane=lane))
        if callback is not None:
            await conn.execute(*statement("batch_callback_set").bind(batch_id=batch_id, type=callback[0],
                                                                      payload=callback[1]))
        rows = await enqueue_many_rows(conn, [
            NewJob(type=r.type, payload=r.payload, lane=lane, batch_id=batch_id,
                   total=r.total, priority=r.priority) for r in wanted])
        return BatchOutcome(batch_id, {r["type"]: r["id"] for r in rows}, skipped)


async def get_batch(db, batch_id: uuid.UUID) -> asyncpg.Record | None:
    return await db.fetchrow(*statement("batch_get").bind(batch_id=batch_id))


async def batch_jobs(db, batch_id: uuid.UUID) -> list[asyncpg.Record]:
    return await db.fetch(*statement("batch_jobs").bind(batch_id=batch_id))


async def cancel_batch(conn, batch_id: uuid.UUID) -> tuple[bool, list[Job], int]:
    """(whether an open batch was cancelled, the unstarted jobs it cancelled, how many
    running ones got a cancel request for their holder). One statement; the stages'
    cancelled hooks are app.pipeline.outcomes.cancel_batch's."""
    rows = await conn.fetch(*statement("batch_cancel").bind(batch_id=batch_id))
    changed = [r for r in rows if r["id"] is not None]
    cancelled = [Job.from_row(r) for r in changed if r["status"] == "cancelled"]
    return rows[0]["cancelled"], cancelled, len(changed) - len(cancelled)


async def reconcile(db) -> list[asyncpg.Record]:
    """Move open batches to the status their children say; returns the batches changed
    (`finished` is true for those that reached a final status just now)."""
    return await db.fetch(*statement("reconcile_batches").bind())


async def report_progress(db, run_id: uuid.UUID, job_id: uuid.UUID, progress: int,
                          total: int | None = None) -> None:
    await db.execute(*statement("job_progress").bind(job_id=job_id, progress=progress, total=total,
                                                     run_id=run_id))
