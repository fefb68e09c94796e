"""pgqueuer's side of `python -m bench --only shapes` (bench/shapes.py): one drain.

Run by the peers' venv (bench/peers.py installs pgqueuer 1.6.0 there), never by the
project's: it imports pgqueuer and nothing of this repository. In SHAPES_DSN's database
(fresh, empty) it installs pgqueuer's schema, enqueues one job per entry of the JSON list
in SHAPES_JOBS (a number of milliseconds to wait, or null for a no-op) in one statement,
and drains them with one worker: library defaults (batch_size 10), the entrypoint capped
at SHAPES_CONCURRENCY jobs at once (0: uncapped). Timed as the peers' own script times
pgqueuer: from just before the worker starts to the first poll (every 50 ms) that sees
every job in pgqueuer_log as successful. A first drain of SHAPES_WARMUP jobs in the same
process is not counted: a pgqueuer worker is a process that has been up a while. Prints
one JSON line: jobs/s, seconds, and each waiting handler's start and end."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "work"
POLL_S = 0.05
DONE_SQL = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"


async def drain(dsn: str, waits: list, concurrency: int, cap: float) -> dict:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        payloads = [None if ms is None else json.dumps({"ms": ms}).encode() for ms in waits]
        await Queries(AsyncpgDriver(conn)).enqueue([ENTRYPOINT] * len(waits), payloads, [0] * len(waits))
    finally:
        await conn.close()
    slots: list[tuple[float, float]] = []
    worker_conn = await asyncpg.connect(dsn)
    pgq = PgQueuer.from_asyncpg_connection(worker_conn)

    @pgq.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
    async def work(job: Job) -> None:
        if job.payload is None:
            return None
        started = time.monotonic()
        await asyncio.sleep(json.loads(job.payload)["ms"] / 1000)
        slots.append((started, time.monotonic()))

    poll = await asyncpg.connect(dsn)
    try:
        t0 = time.perf_counter()
        worker = asyncio.create_task(pgq.run())
        t1 = None
        while time.perf_counter() - t0 < cap:
            if worker.done():
                worker.result()  # its error, if it died
                break
            if await poll.fetchval(DONE_SQL) >= len(waits):
                t1 = time.perf_counter()
                break
            await asyncio.sleep(POLL_S)
        pgq.shutdown.set()
        try:
            await asyncio.wait_for(worker, 30)
        except Exception:  # noqa: BLE001 -- a worker slow to stop does not change the figure
            worker.cancel()
        done = await poll.fetchval(DONE_SQL)
    finally:
        await poll.close()
        await worker_conn.close()
    seconds = (t1 - t0) if t1 else None
    return {"ok": t1 is not None and done == len(waits), "n": len(waits), "done": done,
            "seconds": seconds, "jobs_s": len(waits) / seconds if seconds else None, "slots": slots}


async def main() -> None:
    dsn = os.environ["SHAPES_DSN"]
    waits = json.loads(open(os.environ["SHAPES_JOBS"]).read())
    concurrency = int(os.environ.get("SHAPES_CONCURRENCY", "0"))
    cap = float(os.environ.get("SHAPES_CAP", "120"))
    setup = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(setup)).install()
    finally:
        await setup.close()
    warmup = int(os.environ.get("SHAPES_WARMUP", "0"))
    if warmup:
        await drain(dsn, waits[:warmup], concurrency, cap)
    print(json.dumps(await drain(dsn, waits, concurrency, cap)), flush=True)


if __name__ == "__main__":
    # per-job INFO lines off, as in the peers' scripts: the queue is measured, not logging
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    try:  # pgqueuer's own CLI runs on uvloop, and so do the peers' scripts
        import uvloop
    except ImportError:
        uvloop = None
    (uvloop.run if uvloop else asyncio.run)(main())
