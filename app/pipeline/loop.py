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

from app.engine import jobs as q
from app.engine.jobs import Job
from app.engine.runs import finish_run, start_run
from app.pipeline import notifications
from app.pipeline.maintenance import maintenance_stage, start_of_run
from app.pipeline.outcomes import BatchEndings, error_text, settle
from app.pipeline.registry import check_stages
from app.pipeline.stage import Context, Stage, Tally
from app.settings import Settings, get_settings

log = logging.getLogger("skiplock.pipeline")


@dataclass(frozen=True)
class RunResult:
    """A finished run: its runs row as written (app.runtime.run_json shows it), and the
    claiming budget it had."""
    row: Mapping[str, Any]
    budget_seconds: float

    run_id = property(lambda self: self.row["id"])
    trigger = property(lambda self: self.row["trigger"])
    stop_reason = property(lambda self: self.row["stop_reason"])
    jobs_done = property(lambda self: self.row["jobs_done"])
    jobs_failed = property(lambda self: self.row["jobs_failed"])
    jobs_deferred = property(lambda self: self.row["jobs_deferred"])
    units = property(lambda self: self.row["quota_units"])
    summary = property(lambda self: self.row["summary"])
    error = property(lambda self: self.row["error"])
    started_at = property(lambda self: self.row["started_at"])
    finished_at = property(lambda self: self.row["finished_at"])


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

        budget: seconds to keep claiming (default PIPELINE_BUDGET_SECONDS; the adapters
        pass what app.runtime.run_limits decided, which caps a request).
        hard_limit: seconds until the host kills us, minus what recording needs;
        no handler runs past it, nor is anything claimed (default PLATFORM_LIMIT - FINISH_MARGIN).
        idle: for a long-running worker: when no stage has work, await idle(seconds)
        (woken early by new work) and keep going until the budget is spent."""
        s = self.settings
        started = time.monotonic()
        if budget is None:
            budget = s.pipeline_budget_seconds
        if hard_limit is None:
            hard_limit = s.platform_limit_seconds - s.finish_margin_seconds
        budget = min(budget, hard_limit)  # nothing is claimed that could not finish in time
        self._budget_deadline = started + budget
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
            stop_reason, error = "error", error_text(exc)
            log.exception("run %s failed", run_id)
        row = await asyncio.shield(finish_run(
            self.pool, run_id, stop_reason=stop_reason, done=tally.done, failed=tally.failed,
            deferred=tally.deferred, units=tally.units, summary=tally.summary(), error=error))
        result = RunResult(row, budget)
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
        out = BatchEndings()
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
        await self._settle(stage, out, ctx)
        return out.stop_reason

    async def _guarded(self, limit: float, call: Awaitable[Any]) -> Any:
        """Await a handler under its time limit; stop() can shorten the limit."""
        async with asyncio.timeout(limit) as tm:
            self._timeouts.add(tm)
            try:
                return await call
            finally:
                self._timeouts.discard(tm)

    async def _call_one(self, stage: Stage, job: Job, ctx: Context, out: BatchEndings,
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

    async def _call_batch(self, stage: Stage, jobs: list[Job], ctx: Context, out: BatchEndings,
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

    async def _settle(self, stage: Stage, out: BatchEndings, ctx: Context) -> None:
        s = await settle(self.pool, stage, out, ctx)
        t = ctx.tally
        t.lost += s.lost
        t.stage(stage.type, done=s.done, failed=s.failed, deferred=s.deferred)
        if stage.internal:
            return
        t.done += s.done
        t.deferred += s.deferred
        t.failed += s.failed
        t.gave_up += s.gave_up
        if log.isEnabledFor(logging.INFO):
            log.info(json.dumps({"event": "batch", "runId": str(ctx.run_id), "stage": stage.type,
                                 "done": s.done, "failed": s.failed, "deferred": s.deferred}))


async def run_pipeline(pool, stages: list[Stage], *, trigger: str, budget: float | None = None,
                       settings: Settings | None = None, hard_limit: float | None = None) -> RunResult:
    """One run over `stages` (the user's list; the pipeline adds its own stages first)."""
    return await Pipeline(pool, stages, settings).run(trigger, budget, hard_limit)
