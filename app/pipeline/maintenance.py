"""Housekeeping, declared in one place (RECURRING) with an interval each.

At the start of every run the scheduler enqueues each task whose period has no tick yet
(once per period however many schedulers run: see sql/queries/recurring_tick.sql); the
`maintenance` stage, first in every run, carries them out. Reconciling batches also
happens directly at the start of every run, since a finished batch should not wait."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable

from app.engine import audit, batches, cancels, events, idempotency
from app.engine import jobs as q
from app.engine.queries import statement
from app.engine.runs import close_abandoned_runs
from app.json_values import iso
from app.pipeline import notifications, outcomes, schedule
from app.pipeline.stage import Context, Stage

log = logging.getLogger("skiplock.maintenance")

PRUNE_BATCH = 1000
# Audit rows leave at most this many batches a pass (every 10 minutes: 2.88 million a
# day), so a long backlog (a retention newly set or lowered) drains over many passes
# instead of filling one run with deletes.
AUDIT_PRUNE_BATCHES = 20
MAINTENANCE_TYPE = "maintenance"


async def sweep_stuck(pool, stages: list[Stage], ctx: Context) -> int:
    """Give up each job whose holder died on its last attempt (outcomes.give_up_stuck:
    one transaction per job with its gave_up hook and notification). A hook that raises
    leaves the job stuck for the next sweep. First, a job with a cancel request that no
    run will end (its holder died, or it went back to pending first) is cancelled, not
    retried nor given up (outcomes.cancel_stuck, with its cancelled hook)."""
    swept = 0
    asked = await cancels.stuck_candidates(pool, [stage.lease_terms for stage in stages])
    for stage in stages:
        await _cancel_stuck(pool, stage, asked.get(stage.type, ()), ctx)
        for job_id in await q.stuck_candidates(pool, stage.lease_terms):
            try:
                if not await outcomes.give_up_stuck(pool, stage, job_id, ctx):
                    continue  # another sweep got it first
                swept += 1
                ctx.tally.failed += 1
                ctx.tally.stage(stage.type, failed=1)
            except Exception as exc:
                ctx.tally.errors.append(f"gave_up({stage.type} {job_id}): {outcomes.error_text(exc)}")
                log.warning("giving up stuck %s job %s failed: %s", stage.type, job_id, exc)
    if swept:
        ctx.count("swept", swept)
    return swept


async def _cancel_stuck(pool, stage: Stage, asked: Iterable[uuid.UUID], ctx: Context) -> None:
    for job_id in asked:
        try:
            if await outcomes.cancel_stuck(pool, stage, job_id, ctx):
                ctx.tally.stage(stage.type, cancelled=1)
                if not stage.internal:
                    ctx.tally.cancelled += 1
        except Exception as exc:
            ctx.tally.errors.append(f"cancelled({stage.type} {job_id}): {outcomes.error_text(exc)}")
            log.warning("cancelling stuck %s job %s failed: %s", stage.type, job_id, exc)


async def reconcile_batches(pool, stages: list[Stage], ctx: Context) -> int:
    """Batches take their status from their children; finished ones notify their owner."""
    async with pool.acquire() as conn, conn.transaction():
        changed = await batches.reconcile(conn)
        for row in changed:
            if row["finished"]:
                await notifications.batch_finished(conn, ctx.settings, row["id"], row["lane"],
                                                   row["status"])
    finished = sum(1 for r in changed if r["finished"])
    if finished:
        ctx.count("batches_finished", finished)
    return len(changed)


async def expire_served(pool, stages: list[Stage], ctx: Context) -> int:
    await q.expire_served(pool)
    return 0


async def prune_finished(pool, stages: list[Stage], ctx: Context) -> int:
    """Delete finished jobs past the retention, a bounded batch per statement."""
    async def one_batch() -> int:
        status = await pool.execute(*statement("prune_finished").bind(
            retention_hours=ctx.settings.job_retention_hours, limit=PRUNE_BATCH))
        return int(status.split()[-1])
    pruned = await _in_bounded_batches(ctx, one_batch, "pruned")
    await pool.fetchval(*statement("prune_bookkeeping").bind())
    return pruned


async def expire_idempotency_keys(pool, stages: list[Stage], ctx: Context) -> int:
    """Forget stored Idempotency-Key answers past IDEMPOTENCY_RETENTION_HOURS, a bounded
    batch per statement."""
    return await _in_bounded_batches(
        ctx, lambda: idempotency.expire(pool, ctx.settings.idempotency_retention_hours, PRUNE_BATCH),
        "idempotency_expired")


async def prune_events(pool, stages: list[Stage], ctx: Context) -> int:
    """Delete events the replay rule no longer serves (each room keeps its last
    EVENTS_REPLAY), a bounded batch per statement."""
    return await _in_bounded_batches(
        ctx, lambda: events.prune(pool, ctx.settings.events_replay, PRUNE_BATCH), "events_pruned")


async def prune_audit(pool, stages: list[Stage], ctx: Context) -> int:
    """Delete audit rows older than AUDIT_RETENTION_DAYS (0: keep them all), a bounded
    batch per statement and at most AUDIT_PRUNE_BATCHES batches a pass."""
    days = ctx.settings.audit_retention_days
    if not days:
        return 0
    return await _in_bounded_batches(ctx, lambda: audit.prune(pool, days, PRUNE_BATCH), "audit_pruned",
                                     max_batches=AUDIT_PRUNE_BATCHES)


async def _in_bounded_batches(ctx: Context, one_batch: Callable[[], Awaitable[int]], counter: str,
                              max_batches: int | None = None) -> int:
    """Repeat a delete of at most PRUNE_BATCH rows while the run has time (and, given
    max_batches, at most that many times), until one comes back short (nothing left): no
    statement holds its locks for long. Counted in the run."""
    total = 0
    batches_done = 0
    while ctx.time_left() > 1 and (max_batches is None or batches_done < max_batches):
        n = await one_batch()
        total += n
        batches_done += 1
        if n < PRUNE_BATCH:
            break
    if total:
        ctx.count(counter, total)
    return total


@dataclass(frozen=True)
class Recurring:
    task: str
    every: float  # seconds
    run: Callable[[object, list[Stage], Context], Awaitable[int]]


RECURRING = (
    Recurring("sweep_stuck", 60, sweep_stuck),
    Recurring("reconcile_batches", 60, reconcile_batches),
    Recurring("expire_served", 600, expire_served),
    Recurring("prune_finished", 3600, prune_finished),
    Recurring("expire_idempotency_keys", 3600, expire_idempotency_keys),
    Recurring("events_prune", 600, prune_events),
    Recurring("prune_audit", 600, prune_audit),
)
_BY_TASK = {r.task: r for r in RECURRING}


async def schedule_due(pool) -> list[str]:
    """Enqueue the recurring tasks whose current period has not been ticked yet."""
    rows = await pool.fetch(*statement("recurring_tick").bind(tasks=[r.task for r in RECURRING],
                                                              intervals=[float(r.every) for r in RECURRING]))
    return [r["task"] for r in rows]


async def schedule_periodic(pool, stages: list[Stage], at: datetime | None = None) -> list[str]:
    """Enqueue a job for each period of a periodic stage (Stage.every, Stage.cron) that is
    due and has not been ticked yet (schedule.due_periods); the type of each job enqueued.
    `at`: schedule as of this instant instead of the database's clock (a replayed night)."""
    periodic = {s.type: s for s in stages if s.schedule is not None}
    if not periodic:
        return []
    types, periods, dedupe_keys = [], [], []
    for row in await pool.fetch(*statement("periodic_last").bind(types=list(periodic), at=at)):
        stage = periodic[row["type"]]
        for period in schedule.due_periods(stage.schedule, row["now"], row["last_period"], stage.catch_up):
            types.append(stage.type)
            periods.append(period)
            # with catch-up each period's job is its own; without, one is open at a time
            dedupe_keys.append(f"periodic:{stage.type}:{period.isoformat()}" if stage.catch_up
                               else f"periodic:{stage.type}")
    if not types:
        return []
    rows = await pool.fetch(*statement("periodic_tick").bind(types=types, periods=periods,
                                                             dedupe_keys=dedupe_keys))
    return [r["type"] for r in rows]


async def periodic_schedules(db, stages: list[Stage]) -> dict[str, dict[str, Any]]:
    """Each periodic stage's schedule as people read it (GET /stages, the dashboard,
    `skiplock status`): everySeconds or cron and timezone, catchUp, the period last
    enqueued and how long ago, and the next period's start; times on the schedule's clock."""
    periodic = {s.type: s for s in stages if s.schedule is not None}
    if not periodic:
        return {}
    out = {}
    for row in await db.fetch(*statement("periodic_last").bind(types=list(periodic), at=None)):
        stage = periodic[row["type"]]
        enqueued = row["last_enqueued_at"]
        out[stage.type] = {**stage.schedule.describe(), "catchUp": stage.catch_up,
                           "lastPeriod": iso(stage.schedule.on_clock(row["last_period"])),
                           "lastEnqueuedSecondsAgo": (row["now"] - enqueued).total_seconds() if enqueued else None,
                           "nextPeriod": iso(stage.schedule.on_clock(stage.schedule.next_after(row["now"])))}
    return out


def maintenance_stage(stages: list[Stage]) -> Stage:
    """The stage that carries out recurring tasks, over the pipeline's own stage list."""

    async def run_task(job, ctx: Context) -> None:
        task = _BY_TASK.get(job.payload.get("task"))
        if task is None:
            raise ValueError(f"unknown maintenance task {job.payload.get('task')!r}")
        await task.run(ctx.db, stages, ctx)

    return Stage(type=MAINTENANCE_TYPE, handler=run_task, batch=len(RECURRING), lease=600,
                 timeout=120, max_attempts=3, internal=True)


async def start_of_run(pool, stages: list[Stage], ctx: Context) -> None:
    # A run row whose heartbeat stopped belongs to a killed invocation.
    await close_abandoned_runs(pool)
    # Before the first claims of a database just loaded or restored: their plan needs them.
    if await q.gather_statistics_if_missing(pool):
        log.info("jobs had no statistics yet: analyzed it before claiming")
    await reconcile_batches(pool, stages, ctx)
    if ctx.settings.run_scheduler:
        await schedule_due(pool)
        scheduled = await schedule_periodic(pool, stages)
        if scheduled:
            ctx.count("periodic_enqueued", len(scheduled))
