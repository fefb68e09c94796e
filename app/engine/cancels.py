"""Cancelling a running job: the request is noted on the job (job_admin.cancel_job and
batches.cancel_batch ask), and the run holding it notices and ends it (app/pipeline/
cancel_watch.py). A request no run will end (the holder died, or the job went back to
pending first) is ended by the stuck sweep."""

from __future__ import annotations

import uuid
from typing import Sequence

from app.engine.jobs import Job, Lease
from app.engine.queries import statement


async def requested(db, run_id: uuid.UUID) -> set[uuid.UUID]:
    """The jobs run_id holds that someone asked to cancel."""
    return {r["id"] for r in await db.fetch(*statement("jobs_cancel_requested").bind(run_id=run_id))}


async def end_held(db, run_id: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    """A job run_id holds, with a cancel request, now cancelled; None when the run no
    longer holds it (or nobody asked)."""
    row = await db.fetchrow(*statement("job_cancel_held").bind(run_id=run_id, job_id=job_id))
    return Job.from_row(row) if row else None


async def stuck_candidates(db, leases: Sequence[Lease]) -> dict[str, list[uuid.UUID]]:
    """Jobs of each lease's type whose cancel request no run will end, by type (every
    stage in one statement: a sweep looks at all of them)."""
    rows = await db.fetch(*statement("cancel_stuck_candidates").bind(
        types=[lease.type for lease in leases], lease_seconds=[str(float(lease.lease_seconds)) for lease in leases]))
    found: dict[str, list[uuid.UUID]] = {}
    for r in rows:
        found.setdefault(r["type"], []).append(r["id"])
    return found


async def end_stuck(db, lease: Lease, job_id: uuid.UUID) -> Job | None:
    """One of stuck_candidates cancelled; None when someone else got to it first."""
    row = await db.fetchrow(*statement("cancel_stuck").bind(
        job_id=job_id, type=lease.type, lease_seconds=float(lease.lease_seconds)))
    return Job.from_row(row) if row else None
