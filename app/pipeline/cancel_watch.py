"""A run's watch for cancels of the jobs it holds.

About once a second, while any handler of the run is going, one statement asks which of
the jobs the run holds a person asked to cancel (by run id, off an index of the few open
jobs with a request). A handler whose job is asked for is stopped: its call's timer is
set to now, so it gets CancelledError where it awaits (its `finally` runs), and the loop
ends the job cancelled (outcomes.end_cancelled, the stage's `cancelled` hook in the same
transaction). A batch handler's call is stopped only when every job of its batch is asked
for: the others' work would be lost with it. Otherwise it runs on, and each job asked for
ends cancelled unless the handler finished it. A handler that ended before the watch saw
the request keeps its ending when it succeeded.

The watch reads the run's live calls (the loop's map of each handler call's timer to its
jobs, kept for stop() anyway) only when it looks: a handler call registers nothing for it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, Mapping, Sequence

from app.engine import cancels
from app.engine.jobs import Job

log = logging.getLogger("skiplock.pipeline")

CHECK_SECONDS = 1.0


class CancelWatch:
    def __init__(self, pool, run_id: uuid.UUID, calls: Mapping[asyncio.Timeout, Sequence[Job]]) -> None:
        self._pool = pool
        self._run_id = run_id
        self._calls = calls  # the run's handler calls going now: the timer of each -> its jobs
        self._asked: set[uuid.UUID] = set()  # held jobs a cancel was seen for

    def take(self, job_id: uuid.UUID) -> bool:
        """Whether a cancel of the job was seen while its handler ran (asked once per job)."""
        if job_id in self._asked:
            self._asked.discard(job_id)
            return True
        return False

    async def check(self) -> None:
        """Ask once which held jobs were cancelled, and stop the calls all of whose jobs were."""
        if not self._calls:
            return
        asked = await cancels.requested(self._pool, self._run_id)
        call_of = {job.id: call for call, jobs in self._calls.items() for job in jobs}
        loop = asyncio.get_running_loop()
        for job_id in asked:
            call = call_of.get(job_id)
            if call is None or job_id in self._asked:
                continue
            self._asked.add(job_id)
            if all(j.id in self._asked for j in self._calls[call]):
                call.reschedule(loop.time())

    @asynccontextmanager
    async def watching(self) -> AsyncIterator["CancelWatch"]:
        """Inside: the watch looks every CHECK_SECONDS."""
        task = asyncio.create_task(self._watch_forever())
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch_forever(self) -> None:
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            try:
                await self.check()
            except Exception as exc:  # a missed look does not stop the run: the next one tries again
                log.warning("run %s: cancel watch: %s: %s", self._run_id, type(exc).__name__, exc)
