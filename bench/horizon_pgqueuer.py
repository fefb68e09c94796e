"""pgqueuer's side of the horizon soak (bench/horizon.py): its own worker, one process.

Run by the peers' venv (bench/peers.py installs pgqueuer 1.6.0 there), never by the
project's: it imports pgqueuer and nothing of this repository. It installs pgqueuer's
schema into HORIZON_DSN's database, prints `ready`, then runs PgQueuer's worker with one
no-op entrypoint capped at HORIZON_CONCURRENCY jobs at once (as bench/peers.py's `ep10`
variant: library defaults otherwise) until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "noop"


async def main() -> None:
    dsn = os.environ["HORIZON_DSN"]
    concurrency = int(os.environ.get("HORIZON_CONCURRENCY", "10"))
    setup = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(setup)).install()
    finally:
        await setup.close()

    conn = await asyncpg.connect(dsn)
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, pgq.shutdown.set)
    print("ready", flush=True)
    await pgq.run(batch_size=10)


if __name__ == "__main__":
    # per-job INFO lines off, as in the peers' scripts: the queue is measured, not logging
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    try:  # pgqueuer's own CLI runs on uvloop, and so do the peers' scripts
        import uvloop
    except ImportError:
        uvloop = None
    (uvloop.run if uvloop else asyncio.run)(main())
