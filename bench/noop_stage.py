"""The benchmark's no-op stage for an invocation run as its own process
(PIPELINE_STAGES=bench.noop_stage:STAGES): batch and concurrency from BENCH_BATCH and
BENCH_CONCURRENCY."""

from __future__ import annotations

import os

from app.pipeline.stage import Stage

TYPE = "noop"


async def noop(job, ctx) -> None:
    return None


STAGES = [Stage(type=TYPE, handler=noop, batch=int(os.environ.get("BENCH_BATCH", "50")),
                concurrency=int(os.environ.get("BENCH_CONCURRENCY", "10")), lease=300, timeout=60)]
