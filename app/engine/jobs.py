"""Jobs: enqueue, claim, complete, fail, defer and the stuck sweep, each one named query."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

import asyncpg

from app.engine.claim_limits import Rate, claim_within_limits
from app.engine.db import retry_deadlock
from app.engine.queries import statement
from app.engine.trace_context import current_traceparent

# The lane of work nobody owns (maintenance, notifications, a job enqueued without one).
DEFAULT_LANE = uuid.UUID(int=0)
MAX_DEDUPE_KEY_CHARS = 200  # POST /jobs and `skiplock enqueue` alike; the index holds any key this long
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # a job's own priority: jobs.priority is a smallint


@dataclass
class Job:
    """A claimed job as a handler sees it."""
    id: uuid.UUID
    type: str
    payload: dict[str, Any]
    attempts: int
    lane: uuid.UUID
    run_id: uuid.UUID | None
    batch_id: uuid.UUID | None = None
    dedupe_key: str | None = None
    created_at: datetime | None = None
    trace_context: str | None = None  # the enqueuer's W3C traceparent (trace_context.py)
    priority: int = 0  # its rank inside its lane (NewJob.priority), to pass on to the jobs it enqueues

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> "Job":
        # once per claimed job: by position, no dict of keyword arguments. Only the claim
        # returns trace_context (the handler's span is all that reads it) and priority.
        return cls(row["id"], row["type"], row["payload"], row["attempts"], row["lane"], row["run_id"],
                   row["batch_id"], row["dedupe_key"], row["created_at"], row.get("trace_context"),
                   row.get("priority", 0))
_CLAIM = statement("claim")  # the hot path: translated once, here


@dataclass
class NewJob:
    """One job to enqueue. lane None means DEFAULT_LANE; run_after None means now;
    priority orders it within its lane (higher first, then oldest; PRIORITY_MIN to PRIORITY_MAX)."""
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    dedupe_key: str | None = None
    lane: uuid.UUID | None = None
    run_after: datetime | None = None
    batch_id: uuid.UUID | None = None
    total: int | None = None  # expected units of work, for a progress bar
    trace_context: str | None = None  # None: the enqueuer's current span's, if any
    # seconds the dedupe key stays taken after the job ends (None: free at once)
    unique_for: float | None = None
    priority: int = 0


@dataclass
class Lease:
    """What a stage promises about its jobs: how long a claim holds, how many tries, and
    its limits across every run (None: no such limit; claim_limits.py): how many may be
    held at once, how many start in a window, and the key they hold per (limit_by)."""
    type: str
    lease_seconds: float
    max_attempts: int
    global_concurrency: int | None = None
    rate: Rate | None = None
    limit_by: str | None = None

    @property
    def limited(self) -> bool:
        return self.global_concurrency is not None or self.rate is not None


async def enqueue(db, job: NewJob) -> uuid.UUID | None:
    """Insert one job; None when another job holds its dedupe key (one open, or one that
    ended less than its unique_for ago)."""
    return await db.fetchval(*statement("enqueue").bind(
        type=job.type, payload=job.payload, dedupe_key=job.dedupe_key, lane=job.lane,
        run_after=job.run_after, batch_id=job.batch_id, total=job.total,
        trace_context=job.trace_context or current_traceparent(), unique_for=job.unique_for,
        priority=job.priority))


async def enqueue_replacing(db, job: NewJob) -> tuple[uuid.UUID, bool] | None:
    """Insert one job, or debounce: a pending job of the same type holding its dedupe key
    takes its payload, due time and unique_for instead (it keeps its place in the lane: its
    age and its priority). (the job's id, whether it is new);
    None when the key's holder is running, of another type, or ended within its window."""
    row = await db.fetchrow(*statement("enqueue_replacing").bind(
        type=job.type, payload=job.payload, dedupe_key=job.dedupe_key, lane=job.lane,
        run_after=job.run_after, batch_id=job.batch_id, total=job.total, unique_for=job.unique_for,
        trace_context=job.trace_context or current_traceparent(), priority=job.priority))
    return (row["id"], row["created"]) if row is not None else None


async def holder_of_key(db, dedupe_key: str, lane: uuid.UUID | None) -> uuid.UUID | None:
    """The job holding a dedupe key in a lane (None: the default lane): an open job, or one
    that ended less than its unique_for ago."""
    return await db.fetchval(*statement("job_holding_key").bind(dedupe_key=dedupe_key, lane=lane))


async def enqueue_many(db, jobs: Sequence[NewJob]) -> list[uuid.UUID]:
    """Insert many jobs in one statement; returns the ids of those not deduplicated."""
    return [r["id"] for r in await enqueue_many_rows(db, jobs)]


async def enqueue_many_rows(db, jobs: Sequence[NewJob]) -> list[asyncpg.Record]:
    """Like enqueue_many, returning (id, type) of each inserted job."""
    here = current_traceparent()
    return await db.fetch(
        *statement("enqueue_many").bind(
            types=[j.type for j in jobs], payloads=[j.payload for j in jobs],
            dedupe_keys=[j.dedupe_key for j in jobs], lanes=[j.lane for j in jobs],
            run_afters=[j.run_after for j in jobs], batch_ids=[j.batch_id for j in jobs],
            totals=[j.total for j in jobs], trace_contexts=[j.trace_context or here for j in jobs],
            unique_fors=[j.unique_for for j in jobs], priorities=[j.priority for j in jobs]))


async def claim(db, lease: Lease, run_id: uuid.UUID, limit: int) -> list[Job]:
    """Up to `limit` jobs of the lease's type, now running for run_id: expired leases and
    ready jobs alike, chosen in lane order (priority, least served in the last day, oldest
    ready job), never a job another claim holds, never one of a paused lane; returned
    oldest first."""
    return (await finish_and_claim(db, lease, run_id, limit)).claimed


@dataclass
class FinishedAndClaimed:
    """What finish_and_claim wrote and took."""
    done: int         # of the jobs given as done, those the run still held
    handed_back: int  # of the jobs given back, those the run still held
    claimed: list[Job]


_NO_IDS: list[uuid.UUID] = []


async def finish_and_claim(db, lease: Lease, run_id: uuid.UUID, limit: int,
                           done: Sequence[uuid.UUID] = _NO_IDS,
                           hand_back: Mapping[uuid.UUID, datetime] | None = None) -> FinishedAndClaimed:
    """In one statement: mark `done` finished and hand `hand_back` back (pending again at
    each one's time, attempt returned), each only if run_id still holds it; then claim
    as claim() does (limit 0: claim nothing). One round trip for a batch's endings and
    the next batch."""
    back = hand_back or {}

    def claim_up_to(n: int) -> tuple:
        return _CLAIM.bind(type=lease.type, limit=n, run_id=run_id, lease_seconds=float(lease.lease_seconds),
                           max_attempts=lease.max_attempts, done=done, hand_back=list(back),
                           hand_back_until=list(back.values()))
    if not lease.limited:
        args = claim_up_to(limit)
        rows = await retry_deadlock(db, lambda: db.fetch(*args))
        first = rows[0]
        claimed = [Job.from_row(r) for r in rows] if first["id"] is not None else []
    else:
        first, rows = await retry_deadlock(db, lambda: claim_within_limits(db, lease, run_id, limit, claim_up_to))
        claimed = [Job.from_row(r) for r in rows]
    return FinishedAndClaimed(done=first["done"], handed_back=first["handed_back"], claimed=claimed)


async def complete(db, run_id: uuid.UUID, ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """Mark done the jobs this run still holds; returns those that changed."""
    ids = list(ids)
    if not ids:
        return []
    return [r["id"] for r in await db.fetch(*statement("complete").bind(ids=ids, run_id=run_id))]


async def defer(db, run_id: uuid.UUID, until: dict[uuid.UUID, datetime]) -> list[uuid.UUID]:
    """Back to pending at each job's wake-up time, without burning the attempt."""
    if not until:
        return []
    ids = list(until)
    rows = await db.fetch(*statement("defer").bind(ids=ids, until=[until[i] for i in ids], run_id=run_id))
    return [r["id"] for r in rows]


async def fail(db, run_id: uuid.UUID, job_id: uuid.UUID, error: str,
               max_attempts: int) -> asyncpg.Record | None:
    """Record a failed attempt; the row says 'pending' (retry) or 'failed' (gave up).

    None when this run no longer holds the job."""
    return await db.fetchrow(*statement("fail").bind(job_id=job_id, run_id=run_id, error=error,
                                                     max_attempts=max_attempts))


async def stuck_candidates(db, lease: Lease) -> list[uuid.UUID]:
    rows = await db.fetch(*statement("stuck_candidates").bind(type=lease.type,
                                                              lease_seconds=float(lease.lease_seconds),
                                                              max_attempts=lease.max_attempts))
    return [r["id"] for r in rows]


async def fail_stuck(db, lease: Lease, job_id: uuid.UUID) -> Job | None:
    """Fail one job stuck on its last attempt; None if someone else already did."""
    row = await db.fetchrow(*statement("fail_stuck").bind(job_id=job_id, type=lease.type,
                                                          lease_seconds=float(lease.lease_seconds),
                                                          max_attempts=lease.max_attempts))
    return Job.from_row(row) if row else None


async def expire_served(db) -> None:
    await db.execute(*statement("expire_served").bind())


async def gather_statistics_if_missing(db) -> bool:
    """ANALYZE jobs if it has rows and no statistics yet; True if it did."""
    if not await db.fetchval(*statement("jobs_statistics_missing").bind()):
        return False
    await db.execute(*statement("jobs_analyze").bind())
    return True
