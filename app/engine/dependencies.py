"""Jobs that wait for other jobs, and what a job's handler returned.

A job enqueued with parents is 'waiting' until every parent has ended done; the database
decides and releases it (migration 0046's triggers), so plain SQL that names parents
waits the same way. A handler's result is written here, before its job is marked done,
and read back by the jobs that wait for it."""

from __future__ import annotations

import uuid
from typing import Any, Mapping, Sequence

import asyncpg

from app.engine.jobs import NewJob
from app.engine.queries import statement
from app.engine.trace_context import current_traceparent

# The constraint names the database's refusals carry (jobs_wait_for_parents).
UNKNOWN_PARENT = "jobs_parents_known"
PARENT_CYCLE = "jobs_parents_acyclic"


class ParentRefused(Exception):
    """A job named a parent it cannot wait for: `unknown` (no such job, or not the
    enqueuer's to see; `ids` says which) or `cycle` (itself)."""

    def __init__(self, why: str, message: str, ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.why, self.ids = why, ids or []


async def enqueue_after(db, job: NewJob, parents: Sequence[uuid.UUID], *,
                        run_anyway: bool = False) -> uuid.UUID | None:
    """Insert one job that waits for `parents`; None when another job holds its dedupe key.
    ParentRefused for an unknown parent or the job itself."""
    try:
        return await db.fetchval(*statement("enqueue_after").bind(
            type=job.type, payload=job.payload, dedupe_key=job.dedupe_key, lane=job.lane,
            run_after=job.run_after, trace_context=job.trace_context or current_traceparent(),
            unique_for=job.unique_for, parents=list(parents), run_anyway=run_anyway, priority=job.priority))
    except (asyncpg.ForeignKeyViolationError, asyncpg.CheckViolationError) as exc:
        if exc.constraint_name == UNKNOWN_PARENT:
            raise ParentRefused("unknown", exc.message, (exc.detail or "").split(", ")) from None
        if exc.constraint_name == PARENT_CYCLE:
            raise ParentRefused("cycle", exc.message) from None
        raise


async def save_results(db, run_id: uuid.UUID, results: Mapping[uuid.UUID, str]) -> None:
    """Keep each job's result (its JSON text) while run_id still holds the job."""
    if results:
        ids = list(results)
        await db.execute(*statement("job_results_save").bind(
            ids=ids, results=[results[i] for i in ids], run_id=run_id))


async def parent_results(db, job_id: uuid.UUID) -> dict[uuid.UUID, Any]:
    """What each of the job's parents returned (None: nothing), by parent id."""
    rows = await db.fetch(*statement("job_parent_results").bind(job_id=job_id))
    return {r["id"]: r["result"] for r in rows}
