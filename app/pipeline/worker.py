"""`python -m app worker`: the same pipeline as a long-running loop, for a container.

Each run lasts up to the budget and writes its runs row (trigger `worker`), like a cron
invocation. Between batches with nothing due, it sleeps until a job is enqueued (LISTEN
on `skiplock_jobs`, notified by a trigger on jobs) or the poll interval passes, since
work also becomes due by time (backoff, deferrals, schedules). stop() — on SIGTERM —
stops claiming, gives in-flight handlers the grace period, defers what is still
running, records the run and returns. Running it beside the cron endpoint is safe:
both claim with SKIP LOCKED, and maintenance ticks are enqueued once per period.

LISTEN needs a session of its own, so the listener connects to `dsn`, the direct URL
(DATABASE_DIRECT_URL when DATABASE_URL is a transaction pooler); the pool may be the
pooler's. A database restart does not end the worker: the run records what it can,
the listener reconnects, and the next run starts after a poll interval. Nor does a
worker started while the database restarts end: it waits for it as a run does."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from app.engine.db import connection_lost
from app.engine.runs import QUOTA_STOP_REASONS
from app.pipeline.loop import Pipeline, RunResult
from app.pipeline.run_record import OPEN_RETRY_SECONDS, RunNotRecorded, retrying
from app.pipeline.stage import Stage
from app.settings import Settings

log = logging.getLogger("skiplock.worker")
CHANNEL = "skiplock_jobs"


class Worker:
    def __init__(self, pool, dsn: str, stages: list[Stage], settings: Settings) -> None:
        self.pool = pool
        self.dsn = dsn
        self.settings = settings
        self.pipeline = Pipeline(pool, stages, settings)
        self.runs: list[RunResult] = []
        self._stopped = False
        self._wake = asyncio.Event()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        log.info("stopping: no new claims; in-flight jobs get %ss", self.settings.worker_grace_seconds)
        self.pipeline.stop(self.settings.worker_grace_seconds)
        self._wake.set()

    def _notified(self, *_args) -> None:
        self._wake.set()

    async def _idle(self, max_wait: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), min(max_wait, self.settings.worker_poll_seconds))
        except TimeoutError:
            pass
        if not self._stopped:
            self._wake.clear()

    async def _listen(self) -> asyncpg.Connection:
        listener = await asyncpg.connect(self.dsn)
        await listener.add_listener(CHANNEL, self._notified)
        return listener

    async def run(self) -> None:
        # started while the database restarts, it waits for it as a run does (a bad login ends here)
        listener = await retrying(self._listen, time.monotonic() + OPEN_RETRY_SECONDS, "listening for new jobs")
        try:
            while not self._stopped:
                try:
                    if listener.is_closed():  # the server restarted since
                        listener = await self._listen()
                    result = await self.pipeline.run("worker", idle=self._idle)
                except Exception as exc:
                    if not (isinstance(exc, RunNotRecorded) or connection_lost(exc)):
                        raise
                    log.warning("the database is away (%s: %s); trying again in %ss",
                                type(exc).__name__, exc, self.settings.worker_poll_seconds)
                    await self._idle(self.settings.worker_poll_seconds)
                    continue
                self.runs.append(result)
                if result.stop_reason in ("error", *QUOTA_STOP_REASONS) and not self._stopped:
                    # not a reason to spin: wait a poll interval (or a signal) before trying again
                    await self._idle(self.settings.worker_poll_seconds)
        finally:
            await listener.close()
