"""A run's row, whatever the database does: opened with retries, kept beating while the
run goes, and closed with retries.

A restart of PostgreSQL (or of the pooler in front of it) breaks every connection the
pool holds; the pool opens new ones on the next acquire, once the server answers. So
what the row needs is to try again, with backoff, until a deadline inside the platform
limit: the run keeps its tally in memory meanwhile. If the database stays away until
then, the row is left open and RunNotRecorded says so; its heartbeat stops, and a later
run closes it as abandoned with the counts of its last beat (close_abandoned_runs)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

from app.engine.db import connection_lost
from app.engine.runs import HEARTBEAT_SECONDS, beat, finish_run, start_run
from app.pipeline.stage import Tally

log = logging.getLogger("skiplock.pipeline")

FIRST_RETRY_SECONDS = 0.2
MAX_RETRY_SECONDS = 3.0
# A run that cannot even open its row has nothing to record yet: it waits this long for
# the database (a restart takes seconds), then gives up rather than hold its caller.
OPEN_RETRY_SECONDS = 30.0
MIN_ATTEMPT_SECONDS = 2.0

T = TypeVar("T")


class RunNotRecorded(RuntimeError):
    """The database stayed away until the run's time was up: its row could not be written."""


async def retrying(call: Callable[[], Awaitable[T]], deadline: float, what: str) -> T:
    """call() until it gets through, trying again after a lost connection with growing
    pauses until `deadline` (time.monotonic()); then the last connection error is raised.
    An attempt is cut at the deadline (or after MIN_ATTEMPT_SECONDS, if that is later)."""
    pause = FIRST_RETRY_SECONDS
    while True:
        try:  # one attempt always gets through a late start (a run that used its whole limit)
            return await asyncio.wait_for(call(), max(deadline - time.monotonic(), MIN_ATTEMPT_SECONDS))
        except Exception as exc:
            if not connection_lost(exc) or time.monotonic() + pause >= deadline:
                raise
            log.warning("%s: %s; trying again in %.1f s", what, f"{type(exc).__name__}: {exc}", pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_SECONDS)


class RunRecord:
    """One invocation's runs row, written from its tally."""

    def __init__(self, pool, trigger: str, tally: Tally) -> None:
        self.pool = pool
        self.trigger = trigger
        self.tally = tally
        self.run_id = uuid.uuid4()  # chosen here, so a retried open cannot make two rows

    async def open(self, deadline: float) -> uuid.UUID:
        deadline = min(deadline, time.monotonic() + OPEN_RETRY_SECONDS)
        return await retrying(lambda: start_run(self.pool, self.trigger, self.run_id), deadline,
                              "opening the run's row")

    def _counts(self) -> dict[str, Any]:
        t = self.tally
        return {"done": t.done, "failed": t.failed, "retried": t.retried, "deferred": t.deferred,
                "units": t.units,
                "summary": t.summary()}

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await beat(self.pool, self.run_id, **self._counts())
            except Exception as exc:  # a missed beat does not stop the run: the next one tries again
                log.warning("run %s: heartbeat not written: %s: %s", self.run_id, type(exc).__name__, exc)

    @asynccontextmanager
    async def beating(self) -> AsyncIterator[None]:
        """Inside: the row beats every HEARTBEAT_SECONDS, with the counts so far."""
        task = asyncio.create_task(self._beat_forever())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self, stop_reason: str, error: str | None, deadline: float) -> Mapping[str, Any]:
        """Write the row from the tally; RunNotRecorded if the database stays away until `deadline`."""
        t = self.tally
        try:
            row = await retrying(lambda: finish_run(
                self.pool, self.run_id, stop_reason=stop_reason, done=t.done, failed=t.failed,
                retried=t.retried, deferred=t.deferred, units=t.units, summary=t.summary(), error=error),
                deadline, "recording the run")
        except Exception as exc:
            if not connection_lost(exc):
                raise
            raise RunNotRecorded(
                f"run {self.run_id} could not be recorded: the database stayed unreachable until its "
                f"time was up ({type(exc).__name__}); a later run closes its row as abandoned") from exc
        if row is None:  # not ours to lose silently: the row was opened, so someone removed it
            raise RunNotRecorded(f"run {self.run_id} could not be recorded: its row is gone")
        return row
