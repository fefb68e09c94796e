"""The run: claim a batch from the first stage with work, run it, start again from the
top; stop claiming when the budget is spent; always write the runs row. How each job of
a batch ends is app/pipeline/outcomes.py's to decide and write."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from app.engine import runs
from app.engine.jobs import Job
from app.engine.one_connection import OneConnection
from app.engine.db import connection_lost, why_lost
from app.pipeline import notifications
from app.pipeline.cancel_watch import CancelWatch
from app.pipeline.handler_slots import HandlerSlots
from app.pipeline.maintenance import maintenance_stage, start_of_run
from app.pipeline.outcomes import BatchEndings, Settled, error_text, settle, storable
from app.pipeline.registry import check_stages
from app.pipeline.run_record import RunRecord
from app.pipeline.run_slots import run_slot
from app.pipeline.stage import Context, Stage, Tally
from app.pipeline.tracing import RunTrace
from app.settings import Settings, get_settings

log = logging.getLogger("skiplock.pipeline")


@dataclass(frozen=True)
class RunResult:
    """A finished run: its runs row as written (app.runtime.run_json shows it), and the
    claiming budget it had."""
    row: Mapping[str, Any]
    budget_seconds: float
    database_lost: bool = False  # it stopped because the database connection was lost

    run_id = property(lambda self: self.row["id"])
    trigger = property(lambda self: self.row["trigger"])
    stop_reason = property(lambda self: self.row["stop_reason"])
    jobs_done = property(lambda self: self.row["jobs_done"])
    jobs_failed = property(lambda self: self.row["jobs_failed"])
    jobs_retried = property(lambda self: self.row["jobs_retried"])
    jobs_deferred = property(lambda self: self.row["jobs_deferred"])
    units = property(lambda self: self.row["quota_units"])
    summary = property(lambda self: self.row["summary"])
    error = property(lambda self: self.row["error"])
    started_at = property(lambda self: self.row["started_at"])
    finished_at = property(lambda self: self.row["finished_at"])


IdleWait = Callable[[float], Awaitable[None]]
Batch = tuple[Stage, list[Job]]          # claimed jobs of one stage
Ended = tuple[Stage, BatchEndings]       # what a batch of one stage came to
Started = tuple[Stage, "asyncio.Future[BatchEndings]"]  # a batch whose handlers are going

# The pipeline's own stages (maintenance, notify) are rarely busy: once one is found
# empty, it is looked at again after this long rather than after every batch (a
# webhook waits at most this long behind a backlog). Busy, one rests after each batch
# as long as the batch took, so it has at most about half of a run that has other
# work: webhook deliveries take up to 10 s each, and tenants can make many.
INTERNAL_RECHECK_SECONDS = 1.0
# A user stage found empty is looked at again after this long, not before every batch of
# the stages after it, so stages ahead of the work cost no claim per batch. New work in it
# waits at most this long (when every stage is quiet, all are looked at again before the
# run says there is no work).
EMPTY_STAGE_RECHECK_SECONDS = 1.0
# A shorter batch (housekeeping, a quick delivery) takes no rest: its stage is looked at
# again right away, found empty and left for INTERNAL_RECHECK_SECONDS, and keeps its
# prefetch (bench/NOTES.md).
INTERNAL_REST_AFTER_SECONDS = 0.1

# Earlier stages win, but a user stage passed over this long while stages ahead of it
# had work gets the next claim, so a tenant's flood of an early stage's jobs cannot hold
# every later stage (every tenant's) back for as long as the flood lasts.
STAGE_TURN_SECONDS = 2.0


class Pipeline:
    """One invocation's worth of work over an ordered list of stages.

    The pipeline's own stages come first: `maintenance` (recurring housekeeping) and
    `notify` (webhook deliveries). Both are small and rare, and must not starve behind
    a backlog of user work."""

    def __init__(self, pool, stages: list[Stage], settings: Settings | None = None) -> None:
        check_stages(stages)
        self.pool = pool
        self.settings = settings or get_settings()
        own = [notifications.NOTIFY_STAGE, *stages]
        self.stages = [maintenance_stage(own), *own]
        # the pipeline's own: they rest after a busy batch and take no turns (STAGE_TURN_SECONDS)
        self._rarely_busy = {s.type for s in self.stages if s.internal or s is notifications.NOTIFY_STAGE}
        # the stage whose backlog starts a second claim stream (_two_streams)
        self._backlog_stage: Stage | None = None
        self._stopping = False
        self._budget_deadline = 0.0
        # the handler calls going now: the timer of each (stop() shortens it) -> its jobs
        # (the cancel watch looks them up)
        self._calls: dict[asyncio.Timeout, list[Job]] = {}
        self._trace: RunTrace | None = None  # the run's spans; None: tracing is off
        self._watch: CancelWatch | None = None  # the run's, while it runs
        self._quiet_until: dict[str, float] = {}
        self._claimed_at: dict[str, float] = {}  # a user stage's last claim (STAGE_TURN_SECONDS)
        # a stage's concurrency is the run's, not a batch's or a stream's
        self._slots = HandlerSlots()
        self._backlog: asyncio.Event | None = None
        self._alone_recheck_at = 0.0  # _alone()'s answer holds until then
        self._was_alone = False

    def stop(self, grace: float) -> None:
        """Stop claiming now; in-flight handlers get `grace` seconds, then are deferred."""
        self._stopping = True
        self._budget_deadline = min(self._budget_deadline, time.monotonic())
        cutoff = asyncio.get_running_loop().time() + grace
        for tm in self._calls:
            if tm.when() is None or tm.when() > cutoff:
                tm.reschedule(cutoff)

    async def run(self, trigger: str, budget: float | None = None, hard_limit: float | None = None,
                  idle: IdleWait | None = None) -> RunResult:
        """Run until no work, the budget, a quota stop or an error; return the summary.

        budget: seconds to keep claiming (default PIPELINE_BUDGET_SECONDS; the adapters
        pass what app.runtime.run_limits decided, which caps a request).
        hard_limit: seconds until the host kills us, minus what recording needs;
        no handler runs past it, nor is anything claimed (default PLATFORM_LIMIT - FINISH_MARGIN).
        idle: for a long-running worker: when no stage has work, await idle(seconds)
        (woken early by new work) and keep going until the budget is spent.

        Runs on one pool beyond half its size wait for a slot first (run_slots.py)."""
        async with run_slot(self.pool):
            self._trace = RunTrace.start(trigger)
            run = self._run(trigger, budget, hard_limit, idle)
            return await (run if self._trace is None else self._trace.around(run))

    async def _run(self, trigger: str, budget: float | None, hard_limit: float | None,
                   idle: IdleWait | None) -> RunResult:
        s = self.settings
        started = time.monotonic()
        if budget is None:
            budget = s.pipeline_budget_seconds
        if hard_limit is None:
            hard_limit = s.platform_limit_seconds - s.finish_margin_seconds
        budget = min(budget, hard_limit)  # nothing is claimed that could not finish in time
        self._budget_deadline = started + budget
        hard_deadline = started + hard_limit

        tally = Tally()
        record = RunRecord(self.pool, trigger, tally)  # the row: retried, beating (run_record.py)
        run_id = await record.open(hard_deadline)
        ctx = Context(db=self.pool, run_id=run_id, trigger=trigger, settings=s,
                      deadline=self._budget_deadline, tally=tally)
        stop_reason, error, database_lost = "no_work", None, False
        self._watch = CancelWatch(self.pool, run_id, self._calls)
        async with record.beating(), self._watch.watching():
            try:
                await start_of_run(self.pool, self.stages, ctx)
                stop_reason = await self._loop(ctx, hard_deadline, idle)
            except Exception as exc:
                stop_reason, database_lost = "error", connection_lost(exc)
                if database_lost:  # said in one line: a traceback says nothing more, and a worker retries
                    error = storable(f"the database connection was lost: {why_lost(exc)}")
                    log.warning("run %s stopped: %s", run_id, error)
                else:
                    error = error_text(exc)
                    log.exception("run %s failed", run_id)
        # the finish margin is for this write: half of it for retries, half to spare
        row = await asyncio.shield(record.close(stop_reason, error,
                                                hard_deadline + s.finish_margin_seconds / 2))
        result = RunResult(row, budget, database_lost)
        if log.isEnabledFor(logging.INFO):
            log.info(json.dumps({"event": "run", "runId": str(run_id), "trigger": trigger,
                                 "stopReason": result.stop_reason, "jobsDone": result.jobs_done,
                                 "jobsFailed": result.jobs_failed, "jobsRetried": result.jobs_retried,
                                 "jobsDeferred": result.jobs_deferred,
                                 "units": result.units, "error": error}))
        return result

    async def _loop(self, ctx: Context, hard_deadline: float, idle: IdleWait | None) -> str:
        self._quiet_until.clear()
        self._claimed_at = dict.fromkeys((s.type for s in self.stages), time.monotonic())
        # One connection for all the run's claims and endings, acquired once: a pool
        # acquire and reset around every statement cost a round trip each.
        async with self.pool.acquire() as conn:
            first = OneConnection(conn)
            if self.settings.pipeline_claim_streams < 2 or idle is not None:
                return await self._drain(first, ctx, hard_deadline, idle)
            return await self._two_streams(first, ctx, hard_deadline)

    async def _two_streams(self, first, ctx: Context, hard_deadline: float) -> str:
        """The hot loop, with a second claim in flight while the first is on the server.

        The first stream runs on the run's connection as always. A second one starts when
        the first claims a full batch of the first user stage (a backlog there) while no
        other run is open (overlapping runs already keep the server busy), and claims
        that stage only, only while the first stream could prefetch it too (the stages
        ahead of it are the pipeline's own, found empty a moment ago), so earlier stages
        still win every batch. It goes through the pool a statement at a time, so the runs
        row and its heartbeat share its connection and a run keeps to two. It ends when
        it finds no such batch, and starts again on the next backlog. Handlers run one
        batch at a time across both. When a stream stops for any reason but no work (the
        budget, a stop, an error), the other stops claiming too, hands back what it
        prefetched, and is waited for."""
        self._backlog = asyncio.Event()
        self._alone_recheck_at = 0.0
        one = asyncio.ensure_future(self._drain(first, ctx, hard_deadline, None))
        ended: list[asyncio.Future] = []
        try:
            while not one.done():
                backlog = asyncio.ensure_future(self._backlog.wait())
                await asyncio.wait({one, backlog}, return_when=asyncio.FIRST_COMPLETED)
                backlog.cancel()
                if one.done():
                    break
                self._backlog.clear()
                if not await self._alone(ctx):
                    continue  # asked again on a backlog a second from now
                two = asyncio.ensure_future(self._drain(self.pool, ctx, hard_deadline, None,
                                                        only=self._backlog_stage))
                ended.append(two)
                await asyncio.wait({one, two}, return_when=asyncio.FIRST_COMPLETED)
                if not one.done() and self._found_no_work(two):
                    continue  # the first goes on; a later backlog starts another
                if not self._found_no_work(one) or not self._found_no_work(two):
                    # a stream stopped the run: the other stops claiming
                    self._budget_deadline = min(self._budget_deadline, time.monotonic())
                await asyncio.wait({one, two})
        except BaseException:  # the run itself cancelled: its streams go with it
            for stream in (one, *ended):
                stream.cancel()
            raise
        finally:
            self._backlog = None
        return self._run_stop_reason([one, *ended])

    async def _alone(self, ctx: Context) -> bool:
        """No other run open and beating: the second stream would not take CPU from
        another run's claims (bench/NOTES.md). Asked at most once a second; the answer
        holds meanwhile."""
        if time.monotonic() < self._alone_recheck_at:
            return self._was_alone
        try:
            self._was_alone = not await runs.others_running(self.pool, ctx.run_id)
        except Exception:  # the first stream meets the database's trouble itself
            self._was_alone = False
        self._alone_recheck_at = time.monotonic() + INTERNAL_RECHECK_SECONDS
        return self._was_alone

    @staticmethod
    def _found_no_work(stream: asyncio.Future) -> bool:
        """Still running, or ended finding no work."""
        return not stream.done() or (stream.exception() is None and stream.result() == "no_work")

    @staticmethod
    def _run_stop_reason(streams: list[asyncio.Future]) -> str:
        """The run's reason from its streams': an error first, then a stop other than the
        budget's, then the budget, else no work."""
        errors = [task.exception() for task in streams]  # each one retrieved, none left to log
        for error in errors:
            if error is not None:
                raise error
        reasons = [task.result() for task in streams]
        for reason in reasons:
            if reason not in ("no_work", "time_budget"):
                return reason
        return "time_budget" if "time_budget" in reasons else "no_work"

    async def _drain(self, conn, ctx: Context, hard_deadline: float, idle: IdleWait | None,
                     only: Stage | None = None) -> str:
        """The hot loop, one round trip per batch: while batch k runs, one statement writes
        batch k-1's endings and claims batch k+1 of the same stage (the prefetch), when
        nothing ahead of that stage is due for a look. Batch k+1 starts at once, its jobs
        in the slots batch k frees (handler_slots.py), so no slot waits for batch k's
        slowest job. A batch with failures is settled as soon as it ends."""
        running: Started | None = None  # started: its handlers run, or wait for a slot
        written: Ended | None = None    # ended, endings not written yet
        live: list[asyncio.Future] = []  # every batch started, so none outlives the run
        try:
            while True:
                if running is None:
                    if self._stopping or time.monotonic() >= self._budget_deadline:
                        await self._hand_back(conn, ctx, written, None)
                        return "time_budget"
                    batch, written = await self._claim_first(conn, ctx, written, only), None
                    if batch is None:
                        if idle is None or self._stopping:
                            return "time_budget" if self._stopping else "no_work"
                        wait = self._budget_deadline - time.monotonic()
                        if wait > 0:
                            await idle(wait)
                        continue
                    if self._stopping or time.monotonic() >= self._budget_deadline:
                        await self._hand_back(conn, ctx, written, batch)
                        return "time_budget"
                    running = self._start(batch, ctx, hard_deadline, only, live)
                stage, task = running
                following: Started | None = None
                if self._may_prefetch(stage):
                    claimed = (await self._settle(conn, written, ctx, claim=stage)).claimed
                    if claimed:
                        following = self._start((stage, claimed), ctx, hard_deadline, only, live)
                elif written is not None:
                    await self._settle(conn, written, ctx)
                out = await task
                written, running = (stage, out), following
                if out.stop_reason:
                    # the batch started after it defers what it has not begun (the
                    # deadline has passed): its jobs already going finish, then all is written
                    if running is not None:
                        await self._settle(conn, written, ctx)
                        written = (running[0], await running[1])
                    await self._settle(conn, written, ctx)
                    return out.stop_reason
                if out.failed or out.cancelled:  # written at once: its hooks do not wait for the next batch
                    await self._settle(conn, written, ctx)
                    written = None
        except BaseException:
            # the write failed (the database went away) or the run was cancelled: the
            # handlers still finish before the error goes up, and the connection is not
            # released while anything of the run is going on
            await asyncio.gather(*live, return_exceptions=True)
            raise

    def _start(self, batch: Batch, ctx: Context, hard_deadline: float, only: Stage | None,
               live: list[asyncio.Future]) -> Started:
        """Start a claimed batch's handlers (they take slots as they free up)."""
        stage, jobs = batch
        if only is not None:
            ctx.tally.second_stream_batches += 1
        if (self._backlog is not None and only is None and len(jobs) >= stage.batch
                and stage.type not in self._rarely_busy and self._may_prefetch(stage)):
            self._backlog_stage = stage
            self._backlog.set()
        task = asyncio.ensure_future(self._run_batch(stage, jobs, ctx, hard_deadline))
        live[:] = [t for t in live if not t.done()]
        live.append(task)
        return stage, task

    def _may_prefetch(self, stage: Stage) -> bool:
        """Claim stage's next batch while this one runs? Only when every stage ahead of it
        was found empty a moment ago (earlier stages win every batch), and no stage after
        it is due its turn. Never a rated stage's: its starts count from their claim."""
        now = time.monotonic()
        if stage.rate is not None or self._due_a_turn(after=stage) is not None:
            return False
        for ahead in self.stages:
            if ahead is stage:
                return not self._stopping and now < self._budget_deadline
            if now >= self._quiet_until.get(ahead.type, 0.0):
                return False
        return False

    async def _hand_back(self, conn, ctx: Context, written: Ended | None, batch: Batch | None) -> None:
        """Write what ended, and hand a claimed batch that will not run back at once
        (pending again, attempt and served count returned: the defer_now ending)."""
        if batch is not None:
            stage, jobs = batch
            if written is None or written[0] is not stage:
                await self._settle(conn, written, ctx)
                written = (stage, BatchEndings())
            for job in jobs:
                written[1].defer_now(job)
        await self._settle(conn, written, ctx)

    async def _claim_first(self, conn, ctx: Context, written: Ended | None,
                           only: Stage | None = None) -> Batch | None:
        """A batch from the first stage with work (earlier stages win), the endings still
        to write going with the first claim. Stages skipped for having been empty a
        moment ago are looked at again before saying there is no work. `only` (the second
        stream): that stage, and only while the stages ahead of it are quiet."""
        if only is not None:
            claimed = []
            if self._may_prefetch(only):
                claimed, written = (await self._settle(conn, written, ctx, claim=only)).claimed, None
            if written is not None:
                await self._settle(conn, written, ctx)
            return (only, claimed) if claimed else None
        due = self._due_a_turn()
        if due is not None:
            claimed = (await self._settle(conn, written, ctx, claim=due)).claimed
            written = None
            if claimed:
                return due, claimed
        for recheck in (False, True):
            skipped = False
            for stage in self.stages:
                if time.monotonic() < self._quiet_until.get(stage.type, 0.0):
                    skipped = True  # found empty a moment ago: not worth a claim after every batch
                    continue
                claimed = (await self._settle(conn, written, ctx, claim=stage)).claimed
                written = None
                if claimed:
                    return stage, claimed
                self._quiet_until[stage.type] = time.monotonic() + (
                    INTERNAL_RECHECK_SECONDS if stage.type in self._rarely_busy else EMPTY_STAGE_RECHECK_SECONDS)
            if not skipped or recheck:
                break
            self._quiet_until.clear()
        if written is not None:
            await self._settle(conn, written, ctx)
        return None

    def _due_a_turn(self, after: Stage | None = None) -> Stage | None:
        """The first user stage (after `after`, when given) not claimed for
        STAGE_TURN_SECONDS."""
        since = time.monotonic() - STAGE_TURN_SECONDS
        passed = after is None
        for stage in self.stages:
            if not passed:
                passed = stage is after
            elif stage.type not in self._rarely_busy and self._claimed_at.get(stage.type, since) < since:
                return stage
        return None

    async def _run_batch(self, stage: Stage, jobs: list[Job], ctx: Context,
                         hard_deadline: float) -> BatchEndings:
        out = BatchEndings()
        started = time.monotonic()
        await self._run_handlers(stage, jobs, ctx, out, hard_deadline)
        ended = time.monotonic()
        if stage.type in self._rarely_busy and ended - started >= INTERNAL_REST_AFTER_SECONDS:
            # rests as long as it worked (INTERNAL_RECHECK_SECONDS)
            self._quiet_until[stage.type] = max(self._quiet_until.get(stage.type, 0.0),
                                                ended + (ended - started))
        if out.stop_reason:  # the run stops claiming now, the other stream included
            self._budget_deadline = min(self._budget_deadline, ended)
        return out

    async def _run_handlers(self, stage: Stage, jobs: list[Job], ctx: Context, out: BatchEndings,
                            hard_deadline: float) -> None:
        if stage.batch_handler is not None:
            async with self._slots.hold(stage, whole=True):
                call = self._call_batch(stage, jobs, ctx, out, hard_deadline)
                await (call if self._trace is None else self._trace.batch(stage, jobs, out, call))
            return
        # up to `concurrency` runners taking the jobs in order, each in a slot of its own
        # while it has jobs: a task per runner, not per job
        queue = iter(jobs)
        trace = self._trace  # the run's: without a tracer provider, a loop with nothing else per job

        async def runner() -> None:
            async with self._slots.hold(stage):
                if trace is None:
                    for job in queue:
                        await self._call_one(stage, job, ctx, out, hard_deadline)
                    return
                for job in queue:
                    await trace.one(stage, job, out, self._call_one(stage, job, ctx, out, hard_deadline))
        if stage.concurrency == 1 or len(jobs) == 1:
            await runner()
        else:
            await asyncio.gather(*(runner() for _ in range(min(stage.concurrency, len(jobs)))))

    async def _guarded(self, stage: Stage, limit: float, call: Awaitable[Any], what: str,
                       jobs: list[Job]) -> Any:
        """Await a handler of `jobs` under its time limit; stop() and a cancel of the jobs
        (cancel_watch.py) can shorten the limit.

        A handler that blocks the event loop (time.sleep, a synchronous client) cannot be
        cut: the timer that would cancel it only fires once the loop gets control again. One
        that ended past its limit anyway, returning or raising, is a TimeoutError all the
        same: a stage's timeout holds whether or not its handler awaits. (Its work may have
        happened; a handler that overran asynchronously may have done part of its work too.)"""
        loop = asyncio.get_running_loop()
        started = loop.time()
        tm = asyncio.timeout(limit)
        try:
            async with tm:
                self._calls[tm] = jobs
                try:
                    result = await call
                finally:
                    del self._calls[tm]
        except TimeoutError:
            raise
        except Exception as exc:
            if self._overran(stage, tm, loop, what, started):
                raise TimeoutError from exc
            raise
        if self._overran(stage, tm, loop, what, started):
            raise TimeoutError
        return result

    @staticmethod
    def _overran(stage: Stage, tm: asyncio.Timeout, loop: asyncio.AbstractEventLoop, what: str,
                 started: float) -> bool:
        """Did the call end past its limit (stop()'s grace included)? Said in a warning when
        its timer never fired: the handler held the loop past the limit, and every other job
        of this process (and the run's heartbeat) waited for it all that time."""
        when = tm.when()
        if when is None or loop.time() < when:
            return False
        if not tm.expired():  # not one that swallowed its cancellation: one that blocked
            log.warning("stage %r: %s ran %.1fs, past its timeout of %gs, holding the event loop "
                        "(no job of this process could run meanwhile): counted as timed out; call "
                        "blocking work with `await asyncio.to_thread(...)`",
                        stage.type, what, loop.time() - started, stage.timeout)
        return True

    async def _call_one(self, stage: Stage, job: Job, ctx: Context, out: BatchEndings,
                        hard_deadline: float) -> None:
        now = time.monotonic()
        # Out of time (or the run is stopping): not started, so deferred, not failed.
        if out.stop_reason or now >= self._budget_deadline:
            out.defer_now(job)
            return
        limit = min(stage.timeout, hard_deadline - now)
        try:
            result = await self._guarded(stage, limit, stage.handler(job, ctx.for_job(job)),
                                         f"the handler of job {job.id}", [job])
        except TimeoutError:
            if self._watch.take(job.id):  # stopped by a person's cancel
                out.cancel(job)
            # cut by the platform limit or a shutdown, not by its own timeout: deferred
            elif self._stopping or limit < stage.timeout:
                out.defer_now(job)
            else:
                out.record(job, TimeoutError(f"timed out after {stage.timeout:g}s"))
        except Exception as exc:
            if self._watch.take(job.id):  # a cancel seen as it failed: not tried again
                out.cancel(job)
                return
            out.record(job, exc)
            if out.stop_reason:  # nothing more starts, in this batch or the one after it
                self._budget_deadline = min(self._budget_deadline, time.monotonic())
        else:
            self._watch.take(job.id)  # it finished first: done stands
            out.record(job, None, result)

    async def _call_batch(self, stage: Stage, jobs: list[Job], ctx: Context, out: BatchEndings,
                          hard_deadline: float) -> None:
        if self._stopping or time.monotonic() >= self._budget_deadline:
            for job in jobs:
                out.defer_now(job)
            return
        limit = min(stage.timeout, hard_deadline - time.monotonic())
        try:
            problems = await self._guarded(stage, limit, stage.batch_handler(jobs, ctx),
                                           f"the batch handler of {len(jobs)} jobs", jobs) or {}
        except TimeoutError:
            for job in jobs:
                if self._watch.take(job.id):  # stopped (or asked for) by a person's cancel
                    out.cancel(job)
                elif self._stopping or limit < stage.timeout:
                    out.defer_now(job)
                else:
                    out.record(job, TimeoutError(f"timed out after {stage.timeout:g}s"))
            return
        except Exception as exc:
            problems = {job.id: exc for job in jobs}
        for job in jobs:
            if self._watch.take(job.id) and problems.get(job.id) is not None:
                out.cancel(job)  # asked for, and not done: cancelled, not tried again
            else:
                out.record(job, problems.get(job.id))

    async def _settle(self, conn, written: Ended | None, ctx: Context, *,
                      claim: Stage | None = None) -> Settled:
        """Write a batch's endings (if any) and count them; claim `claim`'s next batch in
        the same round trip when given."""
        if claim is not None:
            self._claimed_at[claim.type] = time.monotonic()
        if written is None:
            if claim is None:
                return Settled()
            stage, out = claim, BatchEndings()
        else:
            stage, out = written
        s = await settle(conn, stage, out, ctx, claim=claim)
        if written is None:
            return s
        t = ctx.tally
        t.lost += s.lost
        t.stage(stage.type, done=s.done, failed=s.failed, retried=s.retried, deferred=s.deferred)
        if s.cancelled:
            t.stage(stage.type, cancelled=s.cancelled)
        if stage.internal:
            return s
        t.cancelled += s.cancelled
        t.done += s.done
        t.deferred += s.deferred
        t.failed += s.failed
        t.retried += s.retried
        if log.isEnabledFor(logging.INFO):
            log.info(json.dumps({"event": "batch", "runId": str(ctx.run_id), "stage": stage.type,
                                 "done": s.done, "failed": s.failed, "retried": s.retried,
                                 "deferred": s.deferred}))
        return s
