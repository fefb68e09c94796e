"""The user stages of `python -m bench --only shapes` (bench/shapes.py), for a `run-once`
run as its own process: PIPELINE_STAGES=bench.shape_stages:STAGES.

BENCH_STAGES stages of types s1 … sN, in that order, each of batch BENCH_BATCH and
concurrency BENCH_CONCURRENCY. A job whose payload names `ms` waits that long (as a
handler awaiting an API would); any other is a no-op. With BENCH_SLOTS set, each waiting
handler's start and end (monotonic seconds) go, as JSON, to that file when the process
exits: how busy the slots were."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import time

from app.pipeline.stage import Stage

COUNT = int(os.environ.get("BENCH_STAGES", "1"))
TYPES = [f"s{i}" for i in range(1, COUNT + 1)]
_SLOTS_FILE = os.environ.get("BENCH_SLOTS")
_slots: list[tuple[float, float]] = []


async def work(job, ctx) -> None:
    ms = job.payload.get("ms")
    if ms is None:
        return None
    started = time.monotonic()
    await asyncio.sleep(ms / 1000)
    _slots.append((started, time.monotonic()))


def _write_slots() -> None:
    with open(_SLOTS_FILE, "w") as out:
        json.dump(_slots, out)


if _SLOTS_FILE:
    atexit.register(_write_slots)

STAGES = [Stage(type=t, handler=work, batch=int(os.environ.get("BENCH_BATCH", "50")),
                concurrency=int(os.environ.get("BENCH_CONCURRENCY", "10")), lease=300, timeout=60)
          for t in TYPES]
