"""How many of one tenant's requests may hold a database connection at once in this
serving process (TENANT_REQUESTS_IN_FLIGHT). The app makes one (app.state.tenant_in_flight)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from contextlib import asynccontextmanager
from typing import AsyncIterator


class InFlight:
    """At most `limit` requests of each tenant hold (or wait for) a pooled connection in
    this process; the tenant's further requests wait their turn here, holding none. The
    pool is shared by every tenant and a request keeps its connection for as long as its
    route runs, so without this one tenant's slow reads (a rare status over a million jobs
    of its own, the dashboard's counts) took every connection and every other tenant's
    request queued behind them (TENANT_REQUESTS_IN_FLIGHT)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._turns: dict[uuid.UUID, asyncio.Semaphore] = {}
        self._users: Counter[uuid.UUID] = Counter()  # holding or waiting, to forget idle tenants

    @asynccontextmanager
    async def turn(self, owner: uuid.UUID) -> AsyncIterator[None]:
        turns = self._turns.setdefault(owner, asyncio.Semaphore(self.limit))
        self._users[owner] += 1
        try:
            async with turns:
                yield
        finally:
            self._users[owner] -= 1
            if self._users[owner] <= 0:
                del self._users[owner]
                del self._turns[owner]
