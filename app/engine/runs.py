"""The runs log: one row per pipeline invocation, written by the pipeline and read by
the API (a keyset page of runs, newest first, or one of them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from app.engine.queries import statement


# A live run beats this often; a run whose last beat is older than ABANDONED_AFTER_SECONDS
# is taken for dead (several missed beats: a busy event loop or a short database restart
# is not enough) and closed by a later run.
HEARTBEAT_SECONDS = 15.0
ABANDONED_AFTER_SECONDS = 60.0

# Why a run stopped: the one list, which runs' CHECK constraint holds too
# (tests/test_run_record.py compares them). All but `error` are healthy.
STOP_REASONS = ("no_work", "time_budget", "quota_reserve", "quota_exhausted", "error")
QUOTA_STOP_REASONS = ("quota_reserve", "quota_exhausted")  # what a handler's StopRun may say


async def start_run(db, trigger: str, run_id: uuid.UUID | None = None) -> uuid.UUID:
    """Open a run's row. With `run_id` (chosen by the caller) it is safe to call again after
    an attempt whose answer was lost."""
    if run_id is None:
        row = await db.fetchrow(*statement("run_start").bind(trigger=trigger))
        return row["id"]
    await db.execute(*statement("run_start_as").bind(run_id=run_id, trigger=trigger))
    return run_id


async def beat(db, run_id: uuid.UUID, *, done: int, failed: int, deferred: int, units: int,
               summary: dict[str, Any], retried: int = 0) -> None:
    """The run is alive; its counts so far go with the beat."""
    await db.execute(*statement("run_heartbeat").bind(run_id=run_id, done=done, failed=failed,
                                                      deferred=deferred, units=units, summary=summary,
                                                      retried=retried))


async def finish_run(db, run_id: uuid.UUID, *, stop_reason: str, done: int, failed: int,
                     deferred: int, units: int, summary: dict[str, Any], error: str | None,
                     retried: int = 0):
    return await db.fetchrow(*statement("run_finish").bind(run_id=run_id, stop_reason=stop_reason,
                                                           done=done, failed=failed, deferred=deferred,
                                                           units=units, summary=summary, error=error,
                                                           retried=retried))


async def others_running(db, run_id: uuid.UUID, silent_seconds: float = ABANDONED_AFTER_SECONDS) -> bool:
    """Whether another run is open and still beating."""
    return await db.fetchval(*statement("runs_others_open").bind(run_id=run_id,
                                                                 silent_seconds=float(silent_seconds)))


async def close_abandoned_runs(db, silent_seconds: float = ABANDONED_AFTER_SECONDS) -> list[uuid.UUID]:
    """Close, as `error`, the open runs that have not beaten for `silent_seconds`."""
    rows = await db.fetch(*statement("close_abandoned_runs").bind(silent_seconds=float(silent_seconds)))
    return [r["id"] for r in rows]


async def list_runs(db, *, stop_reason: str | None, trigger: str | None,
                    after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[asyncpg.Record]:
    """Newest first over (started_at, id); stop_reason 'running' means not finished yet."""
    at, last_id = after if after else (None, None)
    return await db.fetch(*statement("runs_list").bind(stop_reason=stop_reason, trigger=trigger, at=at,
                                                       last_id=last_id, limit=limit))


async def get_run(db, run_id: uuid.UUID) -> asyncpg.Record | None:
    return await db.fetchrow(*statement("run_get").bind(run_id=run_id))
