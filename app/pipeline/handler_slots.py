"""A run's handler slots: at most a stage's `concurrency` of its handlers at once, however
many of its batches are started and however many claim streams the run has.

A batch's runners each hold a slot while they take its jobs one after another, so the
next batch of the same stage, started as soon as it is claimed, runs its jobs in the
slots the current batch frees: no slot waits for the current batch's slowest job. The
slots belong to one stage at a time (a run's concurrency is its current stage's), and a
batch handler takes them all."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from app.pipeline.stage import Stage


class HandlerSlots:
    def __init__(self) -> None:
        self._freed = asyncio.Event()   # set (and replaced) whenever a slot is given back
        self._stage: str | None = None  # the stage whose handlers hold slots
        self._busy = 0
        self._whole = False

    @asynccontextmanager
    async def hold(self, stage: Stage, *, whole: bool = False) -> AsyncIterator[None]:
        """One slot of `stage`'s, held inside; whole: all of them, for one batch handler."""
        await self._take(stage, whole)
        try:
            yield
        finally:
            self._give()

    def _free_for(self, stage: Stage, whole: bool) -> bool:
        if self._busy == 0:
            return True
        return not whole and not self._whole and self._stage == stage.type and self._busy < stage.concurrency

    async def _take(self, stage: Stage, whole: bool) -> None:
        while not self._free_for(stage, whole):
            await self._freed.wait()
        self._stage, self._whole = stage.type, whole
        self._busy += 1

    def _give(self) -> None:
        # no await: a cancelled holder gives its slot back all the same
        self._busy -= 1
        if self._busy == 0:
            self._stage, self._whole = None, False
        self._freed.set()
        self._freed = asyncio.Event()
