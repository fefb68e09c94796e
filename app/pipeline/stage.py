"""What a stage author writes against: Stage, DeferJob, StopRun and the handler's context."""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable

from pydantic import BaseModel

from app.engine.batches import report_progress
from app.engine.claim_limits import LimitKey, Rate
from app.engine.dependencies import parent_results
from app.engine.jobs import Job, Lease
from app.engine.runs import QUOTA_STOP_REASONS
from app.pipeline.schedule import Schedule
from app.pipeline.schedule import parse as parse_schedule

JobHandler = Callable[[Job, "Context"], Awaitable[Any]]
BatchHandler = Callable[[list[Job], "Context"], Awaitable["dict[uuid.UUID, BaseException] | None"]]
GaveUpHook = Callable[[Job, "Context"], Awaitable[None]]
CancelledHook = Callable[[Job, "Context"], Awaitable[None]]
# (lane, payload as stored) -> the job's dedupe key
DedupeKey = Callable[[uuid.UUID, dict[str, Any]], str]
# (db, lane, payload as stored) -> None, or raise JobRefused
Accepts = Callable[[Any, uuid.UUID, dict[str, Any]], Awaitable[None]]


class DedupeKeyFixed(ValueError):
    """A caller named a dedupe key for a stage that says what its jobs' key is."""
    def __init__(self, stage: str, key: str) -> None:
        self.key = key
        super().__init__(f"jobs of type {stage!r} are deduplicated by what they work on: their dedupe "
                         f"key is {key!r}; send that key or none")


class JobRefused(ValueError):
    """A stage's `accepts` hook will not have a job people enqueue. The message is the
    answer as it is (a sentence the sender can act on); `details`, JSON, go with it."""
    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        self.details = details
        super().__init__(message)


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def is_async_callable(fn: Any) -> bool:
    """Does calling `fn` give an awaitable? An async function, a method or functools.partial
    of one, a decorator's wrapper that keeps __wrapped__ (functools.wraps), an object whose
    __call__ is async, or a function marked with inspect.markcoroutinefunction. A plain
    function (a lambda too) is refused even when it returns a coroutine: it cannot be told
    apart from one that returns None, which failed every job only once it ran."""
    seen: set[int] = set()
    while callable(fn) and id(fn) not in seen:  # a loop of __wrapped__ ends here
        seen.add(id(fn))
        if inspect.iscoroutinefunction(fn):
            return True
        # before 3.12, the marker asgiref's markcoroutinefunction sets, which only asyncio reads
        # (its iscoroutinefunction is deprecated from 3.14; inspect reads 3.12's marker)
        if sys.version_info < (3, 12) and asyncio.iscoroutinefunction(fn):
            return True
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        elif not inspect.isroutine(fn) and not isinstance(fn, type):
            fn = fn.__call__  # an instance: its __call__, bound
        else:
            return False
    return False


def _name(fn: Any) -> str:
    """module.function, as a stage's author would look for it."""
    if isinstance(fn, functools.partial):
        return f"functools.partial of {_name(fn.func)}"
    name = getattr(fn, "__qualname__", None)
    if name is None:
        return f"{type(fn).__module__}.{type(fn).__qualname__}()" if callable(fn) else repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else name


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One job type and how to run it.

    handler:        async (job, ctx) for one job at a time, `concurrency` at once; or
    batch_handler:  async (jobs, ctx) for the whole claimed list; it may return
                    {job_id: exception} for the jobs that did not succeed.
    gave_up:        async (job, ctx) when a job fails for good (last attempt failed, or
                    its process died on it). It runs in the transaction that marks the
                    job failed (ctx.db is that connection), so a refund happens once.
    cancelled:      async (job, ctx) when a job is cancelled (by itself or with its
                    batch). Also in the transaction that marks it cancelled, once. A job
                    that had not started: ctx has no run (run_id None); a running one: its
                    handler was stopped first (it got CancelledError, so its `finally`
                    ran), and ctx is its run's. A hook that raises (either one) rolls its
                    ending back.
    payload:        a pydantic model of what the stage's jobs carry; where people enqueue
                    (the API, the CLI) a payload that does not fit is refused (422).
    dedupe:         (lane, payload) -> the dedupe key of the stage's jobs that people
                    enqueue (the API, the CLI): one open job per key and lane, whatever
                    the caller sends, so the same work cannot be queued a thousand times
                    (a stage early in the order would hold every later stage's claims
                    back while the copies drain). Use the key the stage's own enqueues use.
    unique_for:     seconds (or a timedelta) a job's dedupe key stays taken after the job
                    ends, where people enqueue (an enqueue may say otherwise): "at most
                    one digest per account per hour". None: free again when it ends.
    accepts:        async (db, lane, payload) where people enqueue (the API, the CLI, a
                    batch), once the payload fits, and at a retry of one failed job (the
                    API's, the CLI's) on its payload as stored (no model may have checked it: read it with
                    care): raise JobRefused(message) to refuse the
                    job (a 422 job_refused; the CLI's one line, exit 2). db is the
                    enqueuer's own transaction, an API request's as its tenant, so
                    row-level security hides other tenants' rows: "not found" is also
                    "not yours". For ids a job must name of its own lane: each other one
                    would be claimed only to fail, and a flood of distinct ones in an early
                    stage holds every lane's later stages back.
    every:          seconds (or a timedelta): a periodic stage. The first run that starts
                    in each period (periods start on multiples of `every` since the Unix
                    epoch, UTC) enqueues one job of it, payload {"period": its start}, in
                    the ownerless lane; without catch_up, at most one is open at a time.
    cron, tz:       a periodic stage whose periods begin at the times a cron expression
                    names ("0 3 * * MON-FRI") on the clock of the IANA zone `tz` (default
                    "UTC"), daylight-saving changes as Debian's cron treats them
                    (app/pipeline/schedule.py). Instead of `every`, never with it.
    catch_up:       periods missed while no run started (since the one last enqueued)
                    that a periodic stage still gets a job for, each its own, the most
                    recent `catch_up` of them (0: only the current period).
    global_concurrency: at most this many of the stage's jobs held at once across every
                    run, worker and process (a rationed API's own limit): claims of the
                    stage take turns, and each takes no more than the live leases of every
                    run leave room for. A job held back waits, pending, and uses no
                    attempt; a dead holder's place comes back when its lease expires.
    rate:           (N, per_seconds): at most N of the stage's jobs start in any
                    per_seconds (a timedelta too), across every run, worker and process. A
                    start counts from its claim, so a rated stage claims no more than it
                    starts at once (batch <= concurrency for a `handler`) and does not
                    claim ahead. A job held back waits, pending, and uses no attempt.
    limit_by:       "lane" or "payload.<field>" ("payload.account.id" for a nested one):
                    global_concurrency and rate hold per key taken from the job (its lane,
                    the text at that place in its payload, '' when there is none), not for
                    the stage as a whole. A job whose key is at its limit waits; the other
                    keys' jobs are claimed. It needs one of the two limits.
    """
    type: str
    handler: JobHandler | None = None
    batch_handler: BatchHandler | None = None
    batch: int = 10
    concurrency: int = 1
    lease: float | timedelta = 900.0
    max_attempts: int = 3
    timeout: float | timedelta = 60.0
    gave_up: GaveUpHook | None = None
    cancelled: CancelledHook | None = None
    internal: bool = False  # housekeeping: counted in the summary, not in jobs_done/failed
    payload: type[BaseModel] | None = None
    dedupe: DedupeKey | None = None
    unique_for: float | timedelta | None = None
    accepts: Accepts | None = None
    every: float | timedelta | None = None
    cron: str | None = None
    tz: str | None = None
    catch_up: int = 0
    global_concurrency: int | None = None
    rate: tuple[int, float | timedelta] | Rate | None = None
    limit_by: str | None = None
    # every or cron as the scheduler reads it (None: not periodic)
    schedule: Schedule | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.type or not isinstance(self.type, str):
            raise ValueError("a stage needs a type (a non-empty string)")
        if (self.handler is None) == (self.batch_handler is None):
            raise ValueError(f"stage {self.type!r}: give exactly one of handler= or batch_handler=")
        # Awaited only once a job runs: a plain def made every job fail with "object NoneType
        # can't be used in 'await' expression". Said here, where the stage is written.
        for name in ("handler", "batch_handler", "gave_up", "cancelled", "accepts"):
            fn = getattr(self, name)
            if fn is not None and not is_async_callable(fn):
                raise ValueError(f"stage {self.type!r}: {name} {_name(fn)} is not an async function: "
                                 f"make it `async def` (and call blocking work inside it with "
                                 f"`await asyncio.to_thread(...)`)")
        for name in ("batch", "concurrency", "max_attempts", "global_concurrency"):
            value = getattr(self, name)
            if name == "global_concurrency" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"stage {self.type!r}: {name} must be a whole number >= 1")
        self._check_limits()
        if self.payload is not None and not (isinstance(self.payload, type) and issubclass(self.payload, BaseModel)):
            raise ValueError(f"stage {self.type!r}: payload must be a pydantic model class")
        object.__setattr__(self, "lease", _seconds(self.lease))
        object.__setattr__(self, "timeout", _seconds(self.timeout))
        if self.timeout <= 0 or self.timeout >= self.lease:
            raise ValueError(f"stage {self.type!r}: timeout must be positive and shorter than the lease")
        if self.unique_for is not None:
            object.__setattr__(self, "unique_for", _seconds(self.unique_for))
            if not 0 < self.unique_for < float("inf"):
                raise ValueError(f"stage {self.type!r}: unique_for must be a positive number of seconds")
        if self.every is not None:
            object.__setattr__(self, "every", _seconds(self.every))
        object.__setattr__(self, "schedule", parse_schedule(self.type, self.every, self.cron, self.tz,
                                                            self.catch_up))

    def _check_limits(self) -> None:
        """rate and limit_by, in the forms the claim reads (app/engine/claim_limits.py)."""
        try:
            if self.rate is not None and not isinstance(self.rate, Rate):
                object.__setattr__(self, "rate", Rate.of(self.rate))
            if self.limit_by is not None:
                LimitKey.of(self.limit_by)
        except ValueError as exc:
            raise ValueError(f"stage {self.type!r}: {exc}") from None
        if self.limit_by is not None and self.global_concurrency is None and self.rate is None:
            raise ValueError(f"stage {self.type!r}: limit_by needs a limit to hold per key: "
                             f"global_concurrency= or rate=")
        if self.rate is not None and self.handler is not None and self.batch > self.concurrency:
            raise ValueError(f"stage {self.type!r}: a rated stage's jobs start when they are claimed: "
                             f"its batch ({self.batch}) must not be larger than its concurrency "
                             f"({self.concurrency})")

    @property
    def lease_terms(self) -> Lease:
        return Lease(self.type, self.lease, self.max_attempts, self.global_concurrency, self.rate, self.limit_by)

    def people_dedupe_key(self, lane: uuid.UUID, payload: dict[str, Any], given: str | None) -> str | None:
        """The dedupe key of a job people enqueue: the stage's own when it has one (a
        different key given is DedupeKeyFixed), else the one given."""
        if self.dedupe is None:
            return given
        key = self.dedupe(lane, payload)
        if given is not None and given != key:
            raise DedupeKeyFixed(self.type, key)
        return key

    async def people_accept(self, db: Any, lane: uuid.UUID, payload: dict[str, Any]) -> None:
        """Raises JobRefused when the stage's `accepts` refuses a job people enqueue."""
        if self.accepts is not None:
            await self.accepts(db, lane, payload)


def _when(until: datetime | timedelta | float | None) -> datetime:
    now = datetime.now(timezone.utc)
    if until is None:
        return now
    if isinstance(until, datetime):
        return until if until.tzinfo else until.replace(tzinfo=timezone.utc)
    return now + (until if isinstance(until, timedelta) else timedelta(seconds=until))


class DeferJob(Exception):
    """Raise from a handler when the work cannot happen now (not a failure).

    The job goes back to pending until `until` (a datetime, a timedelta or seconds
    from now; default now) and its attempt is handed back."""

    def __init__(self, until: datetime | timedelta | float | None = None, reason: str = "") -> None:
        self.until = _when(until)
        self.reason = reason
        super().__init__(reason or f"deferred until {self.until.isoformat()}")


class FailJob(Exception):
    """Raise from a handler when no retry can make the job succeed (its payload names
    something it may not touch, or is malformed): it fails for good now, with this
    message as its last_error, without using its remaining attempts."""


class StopRun(DeferJob):
    """Defer this job and stop the whole run with a healthy stop reason (the quota is spent)."""

    REASONS = QUOTA_STOP_REASONS

    def __init__(self, stop_reason: str, until: datetime | timedelta | float | None = None) -> None:
        if stop_reason not in self.REASONS:
            raise ValueError(f"StopRun reason must be one of {', '.join(self.REASONS)}")
        self.stop_reason = stop_reason
        super().__init__(until, stop_reason)


@dataclass
class Tally:
    """What a run did, as it goes: the runs row is written from this."""
    done: int = 0
    failed: int = 0    # jobs that ended failed: no attempt left, or failed for good
    retried: int = 0   # failed attempts that will be tried again
    deferred: int = 0
    lost: int = 0  # outcomes dropped because another run had reclaimed the job
    cancelled: int = 0  # jobs a person's cancel stopped while the run held them (cancel_watch.py)
    second_stream_batches: int = 0  # batches the run's second claim stream took (loop.py)
    units: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    stages: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def stage(self, type_: str, **deltas: int) -> None:
        row = self.stages.setdefault(type_, {"done": 0, "failed": 0, "retried": 0, "deferred": 0})
        for key, n in deltas.items():
            row[key] = row.get(key, 0) + n

    def summary(self) -> dict[str, Any]:
        # the handlers' counters under `counts`, by the names they gave: the summary's own
        # keys are the API's words
        out: dict[str, Any] = {"stages": self.stages, "counts": dict(self.counts)}
        if self.lost:
            out["lost"] = self.lost
        if self.cancelled:
            out["cancelled"] = self.cancelled
        if self.second_stream_batches:
            out["secondStreamBatches"] = self.second_stream_batches
        if self.errors:
            out["errors"] = self.errors[-10:]
        return out


@dataclass
class Context:
    """Handed to every handler: the database, the run, and a place to count things."""
    db: Any  # an asyncpg pool, or the transaction's connection inside gave_up
    run_id: uuid.UUID
    trigger: str
    settings: Any
    deadline: float  # time.monotonic() at which the run stops claiming
    tally: Tally
    job: Job | None = None  # the job a handler was given this context with (not a batch_handler's)

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def count(self, key: str, n: int = 1) -> None:
        """Add to a count in the run's summary (pages fetched, contacts found, ...)."""
        self.tally.counts[key] = self.tally.counts.get(key, 0) + n

    def add_units(self, n: int) -> None:
        """Record third-party quota units this run spent."""
        self.tally.units += n

    def with_db(self, db: Any) -> "Context":
        return replace(self, db=db)

    def for_job(self, job: Job) -> "Context":
        # once per job: a copy of the fields, not replace()'s __init__ through each of them
        ctx = object.__new__(type(self))
        ctx.__dict__.update(self.__dict__)
        ctx.job = job
        return ctx

    async def progress(self, done: int, total: int | None = None, *, job: Job | None = None) -> None:
        """How far the job got, in units of the stage's choosing (`total`: out of how many,
        when it is known); a batch's progress bar and its live `batch.progress` events add
        its jobs' up. Written only while this run holds the job. A batch_handler names
        the job."""
        job = job or self.job
        if job is None:
            raise ValueError("ctx.progress needs the job: a batch_handler passes job=")
        await report_progress(self.db, self.run_id, job.id, done, total)

    async def parent_results(self, *, job: Job | None = None) -> dict[uuid.UUID, Any]:
        """What each job this one waited for (its `after`) returned, by job id: the
        handler's return value, None when it returned nothing. A batch_handler names the job."""
        job = job or self.job
        if job is None:
            raise ValueError("ctx.parent_results needs the job: a batch_handler passes job=")
        return await parent_results(self.db, job.id)
