"""A run's handler slots (app/pipeline/handler_slots.py): the next batch's jobs start in the
slots the current batch frees, not after its slowest job; and however many batches and
claim streams, never more than the stage's concurrency of its handlers run at once."""

from __future__ import annotations

import asyncio
import time

from app import Stage
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f


class Watch:
    """Handlers that record when each started and ended, and how many ran at once."""

    def __init__(self, waits: dict[int, float]) -> None:
        self.waits = waits
        self.now = 0
        self.most = 0
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}

    async def handler(self, job, ctx) -> None:
        i = job.payload["i"]
        self.now += 1
        self.most = max(self.most, self.now)
        self.started[i] = time.monotonic()
        try:
            await asyncio.sleep(self.waits.get(i, 0.01))
        finally:
            self.now -= 1
            self.ended[i] = time.monotonic()


async def test_the_next_batch_starts_in_the_slots_the_slow_job_leaves(pool):
    # batch 0: jobs 0 (slow) and 1; the batches after it are quick
    watch = Watch({0: 1.0})
    await f.jobs(pool, "w", 8)  # payload {"i": i}, claimed in i's order
    stage = Stage(type="w", handler=watch.handler, batch=2, concurrency=2)
    settings = load_settings(pipeline_plugins="", run_scheduler=False, pipeline_claim_streams=1)
    result = await Pipeline(pool, [stage], settings).run("manual")
    assert result.jobs_done == 8
    # jobs 2.. (later batches) ran beside job 0, in the slot job 1 left
    assert all(watch.ended[i] < watch.ended[0] for i in range(1, 4)), (watch.started, watch.ended)
    assert watch.most == 2


async def test_never_more_than_the_stages_concurrency_at_once(pool):
    watch = Watch({i: 0.05 * (1 + i % 5) for i in range(60)})
    await f.jobs(pool, "w", 60)
    stage = Stage(type="w", handler=watch.handler, batch=5, concurrency=3)
    # two claim streams, each prefetching: up to four batches claimed at once
    settings = load_settings(pipeline_plugins="", run_scheduler=False, pipeline_claim_streams=2)
    result = await Pipeline(pool, [stage], settings).run("manual")
    assert result.jobs_done == 60 and watch.most == 3
