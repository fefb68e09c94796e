"""How a job ends, decided in one place: done, deferred, failed with backoff, given up,
cancelled.

Every path that ends a job comes through here: the loop (what a claimed batch came to, a
cancel its run noticed included), the stuck sweep (a holder died on the last attempt, or
left a cancel request unended), and the two cancels (one job, a batch). The endings a
stage has a say in run its hook inside the transaction that writes them: `gave_up` when
a job fails for good, `cancelled` when a job is cancelled. A hook that raises rolls its
ending back (HookFailed says which). A job that gives up is announced (the `job.failed`
notification) from that same transaction."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable

import asyncpg

from app.engine import batches, cancels, job_admin
from app.engine import jobs as q
from app.engine.db import retry_deadlock
from app.engine.dependencies import save_results
from app.engine.jobs import Job
from app.pipeline import notifications
from app.pipeline.results import ResultRefused, checked_result
from app.pipeline.stage import Context, DeferJob, FailJob, Stage, StopRun, Tally

STUCK_ERROR = "lease expired on the last attempt"


class HookFailed(Exception):
    """A stage's hook raised while a job was ending; that ending was rolled back. A hook's
    statement cut by its time limit is not the hook's failure and is raised as it is."""

    def __init__(self, hook: str, stage: Stage, job: Job, cause: BaseException) -> None:
        self.public_message = f"the {stage.type!r} stage's {hook} hook failed for job {job.id}"
        super().__init__(f"{self.public_message}: {type(cause).__name__}: {cause}")


def error_text(exc: BaseException) -> str:
    """A failed attempt's last_error (and a failed run's error): always text PostgreSQL
    stores. A handler's message often quotes what came from elsewhere (an upstream answer,
    a tenant's page), and one NUL or lone surrogate in it made the write fail: the job stayed
    `running`, uncounted, until its lease ran out, and again on every attempt."""
    if isinstance(exc, TimeoutError):
        return storable(str(exc)) or "TimeoutError"
    if isinstance(exc, FailJob):
        return storable(str(exc)[:4000])  # written for the queue's user: no class name
    return storable(f"{type(exc).__name__}: {exc}"[:4000])


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` without NUL and with U+FFFD for each lone surrogate: PostgreSQL text holds neither."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    return text


class BatchEndings:
    """What each job of one claimed batch came to, decided from what its handler did:
    returned (done), raised DeferJob or StopRun (deferred), raised anything else (failed;
    FailJob: failed for good, attempts left or not). settle() writes them."""

    def __init__(self) -> None:
        self.done: list[uuid.UUID] = []
        self.deferred: dict[uuid.UUID, datetime] = {}
        self.failed: list[tuple[Job, str, bool]] = []  # (job, error, for good whatever its attempts)
        self.cancelled: list[Job] = []  # a cancel the run noticed stopped them (cancel_watch.py)
        self.results: dict[uuid.UUID, str] = {}  # what done jobs' handlers returned, as JSON (results.py)
        self.stop_reason: str | None = None

    def record(self, job: Job, exc: BaseException | None, result: object = None) -> None:
        if exc is None and result is not None:
            try:
                self.results[job.id] = checked_result(result)
            except ResultRefused as refused:
                exc = FailJob(str(refused))
        if exc is None:
            self.done.append(job.id)
        elif isinstance(exc, DeferJob):
            self.deferred[job.id] = exc.until
            if isinstance(exc, StopRun) and self.stop_reason is None:
                self.stop_reason = exc.stop_reason
        else:
            self.failed.append((job, error_text(exc), isinstance(exc, FailJob)))

    def cancel(self, job: Job) -> None:
        """Stopped by a person's cancel: ends cancelled, whatever the handler was doing."""
        self.cancelled.append(job)

    def defer_now(self, job: Job) -> None:
        """Not started (out of time, or the run is stopping): back to pending, attempt handed back."""
        self.deferred[job.id] = datetime.now(timezone.utc)


@dataclass
class Settled:
    """What settle() wrote for one batch (and the next batch it claimed, if asked)."""
    done: int = 0
    deferred: int = 0
    failed: int = 0   # jobs that ended failed: no attempt left, or failed for good
    retried: int = 0  # failed attempts that will be tried again
    lost: int = 0     # endings dropped: another run had reclaimed the job
    cancelled: int = 0  # stopped by a person's cancel (not failed: an ending of its own)
    claimed: list[Job] = field(default_factory=list)


async def settle(db, stage: Stage, endings: BatchEndings, ctx: Context, *,
                 claim: Stage | None = None) -> Settled:
    """Write a batch's endings, each guarded by the run still holding the job. The done
    and deferred ones go in one statement, which also claims `claim`'s next batch when
    given: the loop's one round trip per batch. A failure whose hook (or write) raises
    is rolled back and noted in the run's errors: the job stays held until its lease
    expires, and then the stuck sweep gives it up.

    db: the pool, or the one connection the loop holds for its claims and endings
    (shaped like a pool: app/engine/one_connection.py)."""
    out = Settled()
    await save_results(db, ctx.run_id, endings.results)  # kept before the jobs are marked done
    if endings.done or endings.deferred or claim is not None:
        lease = (claim or stage).lease_terms
        w = await q.finish_and_claim(db, lease, ctx.run_id, claim.batch if claim else 0,
                                     endings.done, endings.deferred)
        out.done, out.deferred, out.claimed = w.done, w.handed_back, w.claimed
        out.lost = len(endings.done) - w.done + len(endings.deferred) - w.handed_back
    for job, error, for_good in endings.failed:
        try:
            gave_up = await fail(db, stage, job, error, ctx, for_good=for_good)
        except Exception as exc:
            ctx.tally.errors.append(f"fail({stage.type} {job.id}): {error_text(exc)}")  # jsonb-storable
            continue
        if gave_up is None:
            out.lost += 1
            continue
        if gave_up:
            out.failed += 1
        else:
            out.retried += 1
    for job in endings.cancelled:
        try:
            ended = await end_cancelled(db, stage, job, ctx)
        except Exception as exc:
            ctx.tally.errors.append(f"cancelled({stage.type} {job.id}): {error_text(exc)}")
            continue
        if ended:
            out.cancelled += 1
        else:
            out.lost += 1
    return out


async def end_cancelled(db, stage: Stage, job: Job, ctx: Context) -> bool:
    """A job the run held, stopped by a cancel request: cancelled, with its stage's
    `cancelled` hook, in one transaction. False when the run no longer held it. A hook
    that raises rolls the ending back: the job stays held until its lease expires, and
    then the stuck sweep cancels it (the request stands)."""
    async with db.acquire() as conn, conn.transaction():
        ended = await cancels.end_held(conn, ctx.run_id, job.id)
        if ended is None:
            return False
        await _cancelled_hook(stage, ended, ctx.with_db(conn))
        return True


async def cancel_stuck(pool, stage: Stage, job_id: uuid.UUID, ctx: Context) -> bool:
    """A job with a cancel request no run will end (its holder died, or it went back to
    pending first): cancelled, with its `cancelled` hook. False when another sweep (or a
    run that claimed it again) got it first."""
    async with pool.acquire() as conn, conn.transaction():
        job = await cancels.end_stuck(conn, stage.lease_terms, job_id)
        if job is None:
            return False
        await _cancelled_hook(stage, job, ctx.with_db(conn))
        return True


async def fail(db, stage: Stage, job: Job, error: str, ctx: Context, *,
               for_good: bool = False) -> bool | None:
    """One failed attempt: back to pending after a backoff while attempts are left, else
    (or for_good) given up. Returns whether it gave up; None when the run no longer held it.

    A transaction the server cuts to break a deadlock is run again, gave_up included: left
    alone, the job would sit held until its lease ran out, and then be run again (attempts
    left) or given up by the stuck sweep, which calls gave_up as well."""
    async def once() -> bool | None:
        async with db.acquire() as conn, conn.transaction():
            # max attempts 0: the attempt just made is the last, whatever the stage allows
            row = await q.fail(conn, ctx.run_id, job.id, error, 0 if for_good else stage.max_attempts)
            if row is None:
                return None
            if row["status"] != "failed":
                return False
            await _give_up(conn, stage, job, error, ctx)
            return True

    return await retry_deadlock(db, once)


async def give_up_stuck(pool, stage: Stage, job_id: uuid.UUID, ctx: Context) -> bool:
    """A job whose holder died on its last attempt: failed, handed to gave_up. False when
    another sweep got it first."""
    async with pool.acquire() as conn, conn.transaction():
        job = await q.fail_stuck(conn, stage.lease_terms, job_id)
        if job is None:
            return False
        await _give_up(conn, stage, job, STUCK_ERROR, ctx)
        return True


async def _give_up(conn, stage: Stage, job: Job, error: str, ctx: Context) -> None:
    if stage.gave_up is not None:
        try:
            await stage.gave_up(job, ctx.with_db(conn))
        except asyncpg.QueryCanceledError:
            raise  # a statement cut by its time limit (a tenant's cancel): the limit's, not the hook's failure
        except Exception as exc:
            raise HookFailed("gave_up", stage, job, exc) from exc
    await notifications.job_gave_up(conn, ctx.settings, job, error)


async def cancel_job(db, stages: Iterable[Stage], job_id: uuid.UUID, settings) -> asyncpg.Record | None:
    """Cancel an open job. A pending one is cancelled now, its stage's `cancelled` hook
    run in the same transaction; a running one gets a cancel request, and the run that
    holds it stops its handler and ends it (the hook runs then). The job's row as it is
    now, or None when it had already ended."""
    async with db.acquire() as conn, conn.transaction():
        row = await job_admin.cancel_job(conn, job_id)
        if row is not None and row["status"] == "cancelled":
            await _cancelled(conn, stages, [Job.from_row(row)], settings)
    return row


@dataclass(frozen=True)
class BatchCancel:
    """What cancelling a batch did."""
    was_open: bool
    cancelled: int  # jobs that had not started, cancelled now
    requested: int  # running jobs whose holders were asked to cancel them


async def cancel_batch(db, stages: Iterable[Stage], batch_id: uuid.UUID, settings) -> BatchCancel:
    """Cancel an open batch in one transaction: its jobs that have not started are
    cancelled (each through its stage's `cancelled` hook), its running ones get a cancel
    request for their holders."""
    async with db.acquire() as conn, conn.transaction():
        was_open, jobs, requested = await batches.cancel_batch(conn, batch_id)
        await _cancelled(conn, stages, jobs, settings)
    return BatchCancel(was_open, len(jobs), requested)


async def _cancelled(conn, stages: Iterable[Stage], jobs: list[Job], settings) -> None:
    by_type = {s.type: s for s in stages}
    # no run is involved: the hook's context has no run and no time to spend
    ctx = Context(db=conn, run_id=None, trigger="cancel", settings=settings, deadline=time.monotonic(),
                  tally=Tally())
    for job in jobs:
        stage = by_type.get(job.type)
        if stage is not None:
            await _cancelled_hook(stage, job, ctx)


async def _cancelled_hook(stage: Stage, job: Job, ctx: Context) -> None:
    if stage.cancelled is None:
        return
    try:
        await stage.cancelled(job, ctx)
    except asyncpg.QueryCanceledError:
        raise  # as in _give_up
    except Exception as exc:
        raise HookFailed("cancelled", stage, job, exc) from exc
