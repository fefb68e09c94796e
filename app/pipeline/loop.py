"""The run: claim a batch from the first stage with work, run it, start again from the
top; stop claiming when the budget is spent; always write the runs row."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from app.engine import jobs as q
from app.engine.jobs import Job
from app.engine.runs import finish_run, start_run
from app.pipeline import notifications
from app.pipeline.maintenance import maintenance_stage, start_of_run
from app.pipeline.registry import check_stages
from app.pipeline.stage import Context, DeferJob, Stage, StopRun, Tally
from app.settings import Settings, get_settings

log = logging.getLogger("skiplock.pipeline")


@dataclass
class RunResult:
    run_id: uuid.UUID
    trigger: str
    stop_reason: str
    jobs_done: int
    jobs_failed: int
    jobs_deferred: int
    units: int
    summary: dict[str, Any]
    error: str | None
    started_at: datetime
    finished_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": str(self.run_id), "trigger": self.trigger, "stopReason": self.stop_reason,
            "jobsDone": self.jobs_done, "jobsFailed": self.jobs_failed,
            "jobsDeferred": self.jobs_deferred, "units": self.units, "summary": self.summary,
            "error": self.error, "startedAt": self.started_at.isoformat(),
            "finishedAt": self.finished_at.isoformat(),
        }


class _Outcomes:
    """Per-batch results, applied to the database in bulk afterwards."""

    def __init__(self) -> None:
        self.done: list[uuid.UUID] = []
        self.deferred: dict[uuid.UUID, datetime] = {}
        self.failed: list[tuple[Job, str]] = []
        self.stop_reason: str | None = None

    def record(self, job: Job, exc: BaseException | None) -> None:
        if exc is None:
            self.done.append(job.id)
        elif isinstance(exc, DeferJob):
            self.deferred[job.id] = exc.until
            if isinstance(exc, StopRun) and self.stop_reason is None:
                self.stop_reason = exc.stop_reason
        else:
            self.failed.append((job, _error_text(exc)))

    def defer_now(self, job: Job) -> None:
        self.deferred[job.id] = datetime.now(timezone.utc)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return str(exc) or "TimeoutError"
    return f"{type(exc).__name__}: {exc}"[:4000]


IdleWait = Callable[[float], Awaitable[None]]

# The pipeline's own stages (maintenance, notify) are rarely busy: once one is found
# empty, it is looked at again after this long rather than after every batch.
INTERNAL_RECHECK_SECONDS = 1.0


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
        self._stopping = False
        self._budget_deadline = 0.0
        self._timeouts: set[asyncio.Timeout] = set()
        self._quiet_until: dict[str, float] = {}

    def stop(self, grace: float) -> None:
        """Stop claiming now; in-flight handlers get `grace` seconds, then are deferred."""
        self._stopping = True
        self._budget_deadline = min(self._budget_deadline, time.monotonic())
        cutoff = asyncio.get_running_loop().time() + grace
        for tm in self._timeouts:
            if tm.when() is None or tm.when() > cutoff:
                tm.reschedule(cutoff)

    async def run(self, trigger: str, budget: float | None = None, hard_limit: float | None = None,
                  idle: IdleWait | None = None) -> RunResult:
        """Run until no work, the budget, a quota stop or an error; return the summary.

        budget: seconds to keep claiming (capped by PIPELINE_BUDGET_SECONDS).
        hard_limit: seconds until the host kills us, minus what recording needs;
        no handler runs past it (default PLATFORM_LIMIT - FINISH_MARGIN).
        idle: for a long-running worker: when no stage has work, await idle(seconds)
        (woken early by new work) and keep going until the budget is spent."""
        s = self.settings
        started = time.monotonic()
        budget = s.pipeline_budget_seconds if budget is None else min(budget, s.pipeline_budget_seconds)
        if hard_limit is None:
            hard_limit = s.platform_limit_seconds - s.finish_margin_seconds
        self._budget_deadline = started + min(budget, hard_limit)
        hard_deadline = started + hard_limit

        run_id = await start_run(self.pool, trigger)
        tally = Tally()
        ctx = Context(db=self.pool, run_id=run_id, trigger=trigger, settings=s,
                      deadline=self._budget_deadline, tally=tally)
        stop_reason, error = "no_work", None
        try:
            await start_of_run(self.pool, self.stages, ctx)
            stop_reason = await self._loop(ctx, hard_deadline, idle)
        except Exception as exc:
            stop_reason, error = "error", _error_text(exc)
            log.exception("run %s failed", run_id)
        row = await asyncio.shield(finish_run(
            self.pool, run_id, stop_reason=stop_reason, done=tally.done, failed=tally.failed,
            deferred=tally.deferred, units=tally.units, summary=tally.summary(), error=error))
        result = RunResult(
            run_id=run_id, trigger=trigger, stop_reason=row["stop_reason"], jobs_done=row["jobs_done"],
            jobs_failed=row["jobs_failed"], jobs_deferred=row["jobs_deferred"],
            units=row["quota_units"], summary=row["summary"], error=row["error"],
            started_at=row["started_at"], finished_at=row["finished_at"])
        if log.isEnabledFor(logging.INFO):
            log.info(json.dumps({"event": "run", "runId": str(run_id), "trigger": trigger,
                                 "stopReason": result.stop_reason, "jobsDone": result.jobs_done,
                                 "jobsFailed": result.jobs_failed, "jobsDeferred": result.jobs_deferred,
                                 "units": result.units, "error": error}))
        return result

    async def _loop(self, ctx: Context, hard_deadline: float, idle: IdleWait | None) -> str:
        self._quiet_until.clear()
        while True:
            if time.monotonic() >= self._budget_deadline:
                return "time_budget"
            stage, claimed, skipped = await self._claim_first(ctx)
            if not claimed and skipped:
                # before calling it a day, look at the stages skipped as recently empty too
                self._quiet_until.clear()
                stage, claimed, _ = await self._claim_first(ctx)
            if not claimed:
                if idle is None or self._stopping:
                    return "time_budget" if self._stopping else "no_work"
                wait = self._budget_deadline - time.monotonic()
                if wait > 0:
                    await idle(wait)
                continue
            stop = await self._run_batch(stage, claimed, ctx, hard_deadline)
            if stop:
                return stop

    async def _claim_first(self, ctx: Context) -> tuple[Stage | None, list[Job], bool]:
        """A batch from the first stage with work (earlier stages win); whether any stage
        was skipped for having been empty a moment ago."""
        skipped = False
        for stage in self.stages:
            if stage.internal and time.monotonic() < self._quiet_until.get(stage.type, 0.0):
                skipped = True  # found empty a moment ago: not worth a claim after every batch
                continue
            claimed = await q.claim(self.pool, stage.lease_terms, ctx.run_id, stage.batch)
            if claimed:
                return stage, claimed, skipped
            if stage.internal:
                self._quiet_until[stage.type] = time.monotonic() + INTERNAL_RECHECK_SECONDS
        return None, [], skipped

    async def _run_batch(self, stage: Stage, jobs: list[Job], ctx: Context,
                         hard_deadline: float) -> str | None:
        out = _Outcomes()
        if stage.batch_handler is not None:
            await self._call_batch(stage, jobs, ctx, out, hard_deadline)
        elif stage.concurrency == 1 or len(jobs) == 1:
            for job in jobs:
                await self._call_one(stage, job, ctx, out, hard_deadline)
        else:
            gate = asyncio.Semaphore(stage.concurrency)

            async def one(job: Job) -> None:
                async with gate:
                    await self._call_one(stage, job, ctx, out, hard_deadline)
            await asyncio.gather(*(one(j) for j in jobs))
        await self._apply(stage, out, ctx)
        return out.stop_reason

    async def _guarded(self, limit: float, call: Awaitable[Any]) -> Any:
        """Await a handler under its time limit; stop() can shorten the limit."""
        async with asyncio.timeout(limit) as tm:
            self._timeouts.add(tm)
            try:
                return await call
            finally:
                self._timeouts.discard(tm)

    async def _call_one(self, stage: Stage, job: Job, ctx: Context, out: _Outcomes,
                        hard_deadline: float) -> None:
        now = time.monotonic()
        # Out of time (or the run is stopping): not started, so deferred, not failed.
        if out.stop_reason or now >= self._budget_deadline:
            out.defer_now(job)
            return
        limit = min(stage.timeout, hard_deadline - now)
        try:
            await self._guarded(limit, stage.handler(job, ctx))
        except TimeoutError:
            # cut by the platform limit or a shutdown, not by its own timeout: deferred
            if self._stopping or limit < stage.timeout:
                out.defer_now(job)
            else:
                out.record(job, TimeoutError(f"timed out after {stage.timeout:g}s"))
        except Exception as exc:
            out.record(job, exc)
        else:
            out.record(job, None)

    async def _call_batch(self, stage: Stage, jobs: list[Job], ctx: Context, out: _Outcomes,
                          hard_deadline: float) -> None:
        if self._stopping or time.monotonic() >= self._budget_deadline:
            for job in jobs:
                out.defer_now(job)
            return
        limit = min(stage.timeout, hard_deadline - time.monotonic())
        try:
            problems = await self._guarded(limit, stage.batch_handler(jobs, ctx)) or {}
        except TimeoutError:
            for job in jobs:
                if self._stopping or limit < stage.timeout:
                    out.defer_now(job)
                else:
                    out.record(job, TimeoutError(f"timed out after {stage.timeout:g}s"))
            return
        except Exception as exc:
            problems = {job.id: exc for job in jobs}
        for job in jobs:
            out.record(job, problems.get(job.id))

    async def _apply(self, stage: Stage, out: _Outcomes, ctx: Context) -> None:
        t = ctx.tally
        done = await q.complete(self.pool, ctx.run_id, out.done)
        deferred = await q.defer(self.pool, ctx.run_id, out.deferred)
        failed = gave_up = 0
        for job, error in out.failed:
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    row = await q.fail(conn, ctx.run_id, job.id, error, stage.max_attempts)
                    final = row is not None and row["status"] == "failed"
                    if final and stage.gave_up is not None:
                        await stage.gave_up(job, ctx.with_db(conn))
                    if final:
                        await notifications.job_gave_up(conn, self.settings, job, error)
            except Exception as exc:
                # Rolled back: the job stays held until its lease expires, and then the
                # stuck sweep fails it and calls the hook again.
                t.errors.append(f"fail({stage.type} {job.id}): {type(exc).__name__}: {exc}")
                continue
            if row is None:
                t.lost += 1
                continue
            failed += 1
            gave_up += final
        t.lost += (len(out.done) - len(done)) + (len(out.deferred) - len(deferred))
        t.stage(stage.type, done=len(done), failed=failed, deferred=len(deferred))
        if stage.internal:
            return
        t.done += len(done)
        t.deferred += len(deferred)
        t.failed += failed
        t.gave_up += gave_up
        if log.isEnabledFor(logging.INFO):
            log.info(json.dumps({"event": "batch", "runId": str(ctx.run_id), "stage": stage.type,
                                 "done": len(done), "failed": failed, "deferred": len(deferred)}))


async def run_pipeline(pool, stages: list[Stage], *, trigger: str, budget: float | None = None,
                       settings: Settings | None = None, hard_limit: float | None = None) -> RunResult:
    """One run over `stages` (the user's list; the pipeline adds its own stages first)."""
    return await Pipeline(pool, stages, settings).run(trigger, budget, hard_limit)
