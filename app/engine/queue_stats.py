"""What the queue looks like now and what its runs have done, read from the counters,
the partial indexes and the runs' running totals (never by counting jobs, nor every
run): for /metrics, `skiplock status` and readiness. Each reading is one named query."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.queries import query

# The run-duration histogram's bounds, in seconds: a run lasts from a moment (no work) to
# its budget (220 s). The totals are bucketed by the database's run_duration_bounds()
# (migration 0022) as runs finish, so these only label them: both change together.
DURATION_BOUNDS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0)


async def queue_depth(db) -> list[dict]:
    """Per job type: pending, paused (of those pending), running, oldest_ready_seconds
    (None when nothing is ready)."""
    return [dict(r) for r in await db.fetch(query("metrics_queue"))]


@dataclass
class RunTotals:
    """Finished runs of one (trigger, stop reason): how many, their seconds, and their
    durations (buckets[i]: runs that took at most DURATION_BOUNDS[i] seconds)."""
    trigger: str
    stop_reason: str
    runs: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BOUNDS))


async def run_totals(db) -> list[RunTotals]:
    """From the running totals (a few dozen rows, however many runs there are)."""
    n = len(DURATION_BOUNDS)
    totals: dict[tuple[str, str], RunTotals] = {}
    for r in await db.fetch(query("metrics_runs")):
        t = totals.setdefault((r["trigger"], r["stop_reason"]), RunTotals(r["trigger"], r["stop_reason"]))
        t.runs += r["runs"]
        t.seconds += r["seconds"]
        # these runs took at most each of the `bounds_at_or_above` largest bounds
        for i in range(n - r["bounds_at_or_above"], n):
            t.buckets[i] += r["runs"]
    return list(totals.values())


async def open_runs(db) -> dict[str, int]:
    """Runs not finished yet, per trigger."""
    return {r["trigger"]: r["runs"] for r in await db.fetch(query("metrics_runs_open"))}


async def endings_by_type(db, within_seconds: float | None = None) -> list[dict]:
    """Per job type: done, failed (attempts) and deferred, from the finished runs'
    summaries: of every run (the running totals), or of those started in the last
    `within_seconds` (summed from those runs)."""
    if within_seconds is None:
        return [dict(r) for r in await db.fetch(query("metrics_jobs_by_type"))]
    return [dict(r) for r in await db.fetch(query("metrics_jobs_by_type_recent"), float(within_seconds))]


async def last_periodic_ticks(db, types: list[str]) -> dict[str, float]:
    """Seconds since each of these periodic stages was last enqueued (absent: never)."""
    return {r["type"]: r["seconds_ago"] for r in await db.fetch(query("status_periodic"), types)}


async def last_maintenance_tick(db) -> float | None:
    """Seconds since any deployment last enqueued the recurring maintenance; None when
    none ever did (each task's newest tick is kept)."""
    return await db.fetchval(query("status_maintenance"))
