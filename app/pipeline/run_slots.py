"""How many runs one process has going on one pool at once.

A run holds one pool connection for its loop, all run long, and borrows a second one, a
statement at a time, for its runs row, its heartbeat and its housekeeping. Runs holding
every connection of their pool would each wait for a second, for ever: so at most half
the pool's size run at once, and the others wait for a slot before they start. A Lambda
container and a worker have one run at a time and never wait; a serving process that
gets overlapping /cron/pipeline calls may. A pool of one connection cannot run anything
(DB_POOL_SIZE is at least 2)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

# id(pool) -> (its slots, the runs using or waiting for them). An entry lives only while
# a run on that pool does, so the pool is alive and its id is its own (asyncpg's Pool
# takes no weak reference and no attribute).
_slots: dict[int, tuple[asyncio.Semaphore, int]] = {}


class PoolTooSmall(ValueError):
    """A run needs a pool of at least two connections."""


@asynccontextmanager
async def run_slot(pool) -> AsyncIterator[None]:
    size = getattr(pool, "get_max_size", None)
    if size is None:  # a single connection lent by the caller: its runs are the caller's to order
        yield
        return
    if size() < 2:
        raise PoolTooSmall(f"a run holds one connection and borrows another: a pool of {size()} "
                           "cannot run the pipeline (DB_POOL_SIZE must be at least 2)")
    key = id(pool)
    slots, users = _slots.get(key) or (asyncio.Semaphore(size() // 2), 0)
    _slots[key] = (slots, users + 1)
    try:
        async with slots:
            yield
    finally:
        slots, users = _slots[key]
        if users == 1:
            del _slots[key]
        else:
            _slots[key] = (slots, users - 1)
