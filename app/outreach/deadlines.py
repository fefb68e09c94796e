"""Due-time jobs, by example: a deadline (an SLA timer) that latches its breach once.

    deadline_id = await start_deadline(pool, "ticket:123", due_at)
    ...
    await resolve_deadline(pool, deadline_id)     # in time: the check finds nothing to do

The check is an ordinary job with `run_after = due_at`, so no scheduler polls for due
timers: the claim query already only takes jobs that are due. The breach is one guarded
UPDATE, so a reclaimed job, a second check or two overlapping runs cannot fire it twice.
Add DEADLINE_STAGE to your stage list to use it."""

from __future__ import annotations

import uuid
from datetime import datetime

from app.engine.jobs import Job
from app.outreach.sql import statement
from app.pipeline.stage import Context, Stage


async def start_deadline(db, subject: str, due_at: datetime) -> uuid.UUID:
    return await db.fetchval(*statement("deadline_start").bind(subject=subject, due_at=due_at))


async def resolve_deadline(db, deadline_id: uuid.UUID) -> bool:
    """True if resolved in time; False if it had already breached (or was resolved)."""
    return await db.fetchval(*statement("deadline_resolve").bind(deadline_id=deadline_id)) is not None


async def check_deadline(job: Job, ctx: Context) -> None:
    deadline_id = uuid.UUID(job.payload["deadline_id"])
    breached = await ctx.db.fetchrow(*statement("deadline_breach").bind(deadline_id=deadline_id))
    if breached is not None:
        ctx.count("deadlines_breached")
        # here a real app would page someone, e.g. enqueue a notification job


DEADLINE_STAGE = Stage(type="deadline", handler=check_deadline, batch=50, concurrency=5,
                       lease=60, timeout=20)
