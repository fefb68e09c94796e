"""What people and scripts do to jobs from outside the pipeline: list them a keyset page
at a time, look one up, cancel one (or ask its holder to), retry one that failed."""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from app.engine.jobs import DEFAULT_LANE
from app.engine.queries import statement


@dataclass(frozen=True)
class JobFilter:
    status: str | None = None
    type: str | None = None
    lane: uuid.UUID | None = None
    batch_id: uuid.UUID | None = None
    since: datetime | None = None   # created at or after
    until: datetime | None = None   # created before
    error: str | None = None        # text in last_error, any case


async def list_jobs(db, where: JobFilter, after: uuid.UUID | None, limit: int, *,
                    own_lanes: bool = False) -> list[asyncpg.Record]:
    """Newest first by id (job ids grow with creation time), strictly after the job
    `after` when given. `own_lanes`, for a tenant's transaction: read the caller's lanes
    one by one instead of the whole table with row-level security dropping the rest (the
    same rows; the cost then grows with the caller's jobs, not every tenant's). A filter
    on one lane (but the all-zero lane, which the lane index leaves out) reads that lane
    the same way, for anyone."""
    page = dict(status=where.status, type=where.type, lane=where.lane, batch_id=where.batch_id,
                since=where.since, until=where.until, error=where.error, after=after, limit=limit)
    # A plan made for the values: the pools' generic plan, not knowing which of the seven
    # filters are NULL, expects about one row and fetches and sorts every job it could show
    # (a million for an admin's page); planned for the values the page walks the key. The
    # planning (under a millisecond) is paid on each call. Inside a (sub)transaction, so
    # the caller's mode is back afterwards, even when the listing fails.
    async with _connection(db) as conn, conn.transaction():
        if own_lanes:
            listing = statement("jobs_list_by_lanes").bind(**page, lanes=None)
        elif where.lane is not None and where.lane != DEFAULT_LANE:
            listing = statement("jobs_list_by_lanes").bind(**page, lanes=[where.lane])
        else:
            listing = statement("jobs_list").bind(**page, ids=await _few_error_matches(conn, where.error))
        was = await conn.fetchval(*statement("plan_for_values").bind())
        rows = await conn.fetch(*listing)
        await conn.execute(*statement("plan_cache_mode_set").bind(mode=was))
    return rows


# An error text found in at most this many jobs is read by their ids: a page then costs a
# lookup each at most, against a walk of every error newer than the matches.
ERROR_MATCHES_BY_ID = 500


async def _few_error_matches(conn, error: str | None) -> list[uuid.UUID] | None:
    """The jobs whose error holds `error`, when they are few (the trigram index finds them:
    migration 0066); None when there is no text or it is common."""
    if error is None:
        return None
    ids = await conn.fetchval(*statement("jobs_error_matches").bind(error=error, cap=ERROR_MATCHES_BY_ID))
    return ids if len(ids) <= ERROR_MATCHES_BY_ID else None


def _connection(db):
    """db's connection: db itself, or one acquired from a pool (or a OneConnection)."""
    if isinstance(db, asyncpg.Connection):
        return nullcontext(db)
    return db.acquire()


async def get_job(db, job_id: uuid.UUID) -> asyncpg.Record | None:
    return await db.fetchrow(*statement("job_get").bind(job_id=job_id))


async def cancel_job(db, job_id: uuid.UUID) -> asyncpg.Record | None:
    """The job as the cancel left it: cancelled when it was pending; running with a cancel
    request when it was running (its holder ends it: app.pipeline.cancel_watch). None when
    it had already ended (or does not exist). One statement: the ending, with the stage's
    hook, is app.pipeline.outcomes.cancel_job."""
    return await db.fetchrow(*statement("job_cancel").bind(job_id=job_id))


class DedupeKeyTaken(Exception):
    """Another open job holds the dedupe key of the job being retried."""


async def retry_job(db, job_id: uuid.UUID) -> asyncpg.Record | None:
    """The job, now pending with attempts reset; None when it had not failed (or does not
    exist). Raises DedupeKeyTaken when another open job has its dedupe key."""
    try:
        # its own (sub)transaction: a refused retry must not spoil the caller's transaction
        async with db.acquire() as conn, conn.transaction():
            return await conn.fetchrow(*statement("job_retry").bind(job_id=job_id))
    except asyncpg.UniqueViolationError:
        raise DedupeKeyTaken(job_id) from None


async def waiting_in_own_lanes(db) -> int:
    """Jobs waiting (pending) in the lanes the caller owns, from the lane counters."""
    return await db.fetchval(*statement("tenant_waiting_jobs").bind())


async def visible_lane(db, lane: uuid.UUID) -> uuid.UUID | None:
    """The lane's id if it exists and the caller can see it (under row-level security: a
    tenant, its own lanes; an admin, every lane)."""
    return await db.fetchval(*statement("lane_visible").bind(lane=lane))


async def retry_failed_jobs(db, *, type_: str | None = None, within_seconds: float | None = None,
                            cancelled: bool = False) -> list[asyncpg.Record]:
    """Every failed job (of `type_`, finished in the last `within_seconds`; cancelled ones
    too only when asked) back to pending in one statement: (id, type) of each. Jobs whose
    dedupe key an open job holds stay as they are."""
    return await db.fetch(*statement("jobs_retry_failed").bind(type=type_, within_seconds=within_seconds,
                                                               cancelled=cancelled))
