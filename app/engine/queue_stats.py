"""What the queue looks like now and what its runs have done, read from the counters,
the partial indexes and the runs' running totals (never by counting jobs, nor every
run): for /metrics, `skiplock status` and readiness. Each reading is one named query."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from app.engine.ended_minutes import roll_up_endings
from app.engine.queries import statement

# The run-duration histogram's bounds, in seconds: a run lasts from a moment (no work) to
# its budget (220 s). The totals are bucketed by the database's run_duration_bounds()
# (migration 0022) as runs finish, so these only label them: both change together.
DURATION_BOUNDS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0)


async def queue_depth(db) -> list[dict]:
    """Per job type: pending, paused (of those pending), running, oldest_ready_seconds
    (None when nothing is ready)."""
    return [dict(r) for r in await db.fetch(*statement("metrics_queue").bind())]


@dataclass
class RunTotals:
    """Finished runs of one (trigger, stop reason): how many, their seconds, and their
    durations (buckets[i]: runs that took at most DURATION_BOUNDS[i] seconds)."""
    trigger: str
    stop_reason: str
    runs: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BOUNDS))


def unhandled(depth: list[dict], handled: Iterable[str]) -> list[dict]:
    """Of queue_depth's rows, the job types waiting that no stage handles here (a typo in
    a plain INSERT, a plug-in left out): {type, pending}, most first. They would wait for
    ever, unremarked. `handled`: every type this process runs, the pipeline's own included."""
    known = set(handled)
    rows = [{"type": r["type"], "pending": r["pending"]} for r in depth
            if r["type"] not in known and r["pending"]]
    return sorted(rows, key=lambda r: (-r["pending"], r["type"]))


async def run_totals(db) -> list[RunTotals]:
    """From the running totals (a few dozen rows, however many runs there are)."""
    n = len(DURATION_BOUNDS)
    totals: dict[tuple[str, str], RunTotals] = {}
    for r in await db.fetch(*statement("metrics_runs").bind()):
        t = totals.setdefault((r["trigger"], r["stop_reason"]), RunTotals(r["trigger"], r["stop_reason"]))
        t.runs += r["runs"]
        t.seconds += r["seconds"]
        # these runs took at most each of the `bounds_at_or_above` largest bounds
        for i in range(n - r["bounds_at_or_above"], n):
            t.buckets[i] += r["runs"]
    return list(totals.values())


# The queue card counts ready and waiting jobs up to this many per type; past it, "1,000+".
# An admin's ready is exact while no more wait (the lane counters: queue_pending_by_type.sql).
OPEN_COUNT_CAP = 1_000


async def jobs_by_type(db, own_lanes: bool) -> list[dict]:
    """Per job type: ready and waiting (each at most OPEN_COUNT_CAP; ready_more and
    waiting_more: there are more; an admin's ready is exact while no more wait), running,
    and the done, failed and cancelled of the last day (the closed minutes from their
    rollups), with the oldest ready job's wait.
    own_lanes: a tenant's, lane by lane from its own lanes; else every lane."""
    await roll_up_endings(db)
    rows = [dict(r) for r in await db.fetch(*statement("dashboard_queue").bind(own_lanes=own_lanes,
                                                                                cap=OPEN_COUNT_CAP))]
    if not own_lanes:  # ready, exact: the type's pending jobs less those counted not yet due
        pending = {r["type"]: r["pending"] for r in await db.fetch(*statement("queue_pending_by_type").bind())}
        for row in rows:
            if row["type"] in pending and not row["waiting_more"]:
                row["ready"], row["ready_more"] = max(pending[row["type"]] - row["waiting"], 0), False
    return rows


async def open_runs(db) -> dict[str, int]:
    """Runs not finished yet, per trigger."""
    return {r["trigger"]: r["runs"] for r in await db.fetch(*statement("metrics_runs_open").bind())}


async def endings_by_type(db, within_seconds: float | None = None) -> list[dict]:
    """Per job type: done, failed, retried and deferred, from the finished runs'
    summaries: of every run (the running totals, with cancelled: the jobs that ended
    cancelled, counted as they did), or of those started in the last `within_seconds`
    (summed from those runs)."""
    if within_seconds is None:
        return [dict(r) for r in await db.fetch(*statement("metrics_jobs_by_type").bind())]
    recent = statement("metrics_jobs_by_type_recent").bind(within_seconds=float(within_seconds))
    return [dict(r) for r in await db.fetch(*recent)]


async def last_maintenance_tick(db) -> float | None:
    """Seconds since any deployment last enqueued the recurring maintenance; None when
    none ever did (each task's newest tick is kept)."""
    return await db.fetchval(*statement("status_maintenance").bind())


# The queue's own tables, whose row versions /metrics, `skiplock status` and the
# dashboard show: the ones every job or run rewrites. The one list: the query takes it as
# a parameter and leaves out a name with no table in the current schema.
QUEUE_TABLES = ("jobs", "job_lanes", "job_lane_journal", "job_lane_hours", "settled_backlog", "events",
                "event_rooms", "runs")
# `skiplock status` names what holds the horizon once it has held it this long, or, when
# how long is unknown (another role's session read without pg_read_all_stats, a replica's
# feedback through an active slot), once it is this many xids behind.
HORIZON_WARN_SECONDS = 60.0
HORIZON_WARN_XIDS = 100_000
HORIZON_HOLDERS = 3


async def horizon_holders(db, limit: int = HORIZON_HOLDERS) -> list[dict]:
    """What holds back the xmin horizon (sessions, prepared transactions, replication
    slots), oldest first: kind, pid, name, role, database, state, query, seconds (None:
    unknown), xid_age."""
    return [dict(r) for r in await db.fetch(*statement("horizon_holders").bind(limit=limit))]


async def queue_tables(db) -> list[dict]:
    """Per queue table that exists: table_name, live, dead, autovacuum_seconds_ago."""
    rows = await db.fetch(*statement("queue_tables_vacuum").bind(tables=list(QUEUE_TABLES)))
    return [dict(r) for r in rows]


def holder_words(h: dict) -> str:
    """Who holds the horizon, in words: 'session 4242 (report, role ann, database shop)'."""
    if h["kind"] == "prepared":
        return f"prepared transaction {h['name']!r} (role {h['role']}, database {h['database']})"
    if h["kind"] == "slot":
        active = "" if h["pid"] is None else f", pid {h['pid']}"
        return f"replication slot {h['name']} ({h['state']}{active})"
    about = [h["name"] or None, f"role {h['role']}" if h["role"] else None,
             f"database {h['database']}" if h["database"] else "a replica's walsender"]
    return f"session {h['pid']} ({', '.join(a for a in about if a)})"


def held_too_long(holder: dict | None) -> bool:
    """Whether `holder` has held the horizon past the warning's threshold."""
    if holder is None:
        return False
    if holder["seconds"] is None:
        return holder["xid_age"] >= HORIZON_WARN_XIDS
    return holder["seconds"] >= HORIZON_WARN_SECONDS


async def horizon(db) -> dict:
    """The horizon's holders and the queue tables' row versions, as `skiplock status
    --json` and GET /stats answer them."""
    holders = await horizon_holders(db)
    tables = await queue_tables(db)
    return {
        "heldTooLong": held_too_long(holders[0] if holders else None),
        "warnSeconds": HORIZON_WARN_SECONDS, "warnXids": HORIZON_WARN_XIDS,
        "holders": [{"who": holder_words(h), "kind": h["kind"], "pid": h["pid"], "name": h["name"], "role": h["role"],
                     "database": h["database"], "state": h["state"], "query": h["query"],
                     "seconds": h["seconds"], "xidAge": h["xid_age"]} for h in holders],
        "tables": [{"table": t["table_name"], "live": t["live"], "dead": t["dead"],
                    "autovacuumSecondsAgo": t["autovacuum_seconds_ago"]} for t in tables],
        "deadTuples": sum(t["dead"] for t in tables),
    }
