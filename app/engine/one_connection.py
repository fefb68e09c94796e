"""One connection shaped like a pool, for code written against a pool (engine and
pipeline functions that `acquire()`) when the caller holds a transaction of its own:
an API request's tenant transaction, a CLI command acting as `system`/`cli`.
`acquire()` hands back the same connection, and `transaction()` on it nests (a savepoint)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg


class OneConnection:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        yield self._conn

    def __getattr__(self, name: str):
        return getattr(self._conn, name)
