"""Connections: an asyncpg pool whose connections speak JSON for jsonb, straight to
PostgreSQL or through a transaction pooler (PgBouncer, RDS Proxy, Supabase's pooler)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Awaitable, Callable, TypeVar

import asyncpg

T = TypeVar("T")

log = logging.getLogger("skiplock.db")

# What a lost or refused connection looks like (PostgreSQL restarting or shutting down,
# a pooler that lost its server, the socket gone): worth trying again shortly, unlike an
# error in the statement itself.
CONNECTION_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError,
                     asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
                     asyncpg.TooManyConnectionsError)
# The driver's own errors, when all they say is that the connection was cut. A server
# shutting down says goodbye on every idle pooled connection; asyncpg then waits for a
# sync that never comes, and the next query on it fails with "cannot switch to state N;
# another operation (2) is in progress" (2: consuming an error; asyncpg issues 784,
# 1069), or "connection is closed" once it has seen the socket go. Other driver errors
# are bugs.
_CUT = ("another operation (2) is in progress", "connection is closed")


def was_cut(exc: BaseException) -> bool:
    """A driver error that only says the connection was cut under it."""
    return isinstance(exc, (asyncpg.InternalClientError, asyncpg.InterfaceError)) and any(
        marker in str(exc) for marker in _CUT)


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` means the connection (or the server) went away: worth a retry. Not a
    protocol violation, a kind of connection error that never heals: a transaction pooler
    refusing the pool's startup parameter, say (DATABASE_DIRECT_URL unset)."""
    if isinstance(exc, asyncpg.ProtocolViolationError):
        return False
    return isinstance(exc, CONNECTION_ERRORS) or was_cut(exc)


def why_lost(exc: BaseException) -> str:
    """What a lost connection said, in words: of the errors it set off (each later one raised
    while handling the one before), the first from the server or the socket. The driver's
    own later complaints ("released back to the pool": asyncpg detaches a closed
    connection from its pool; "another operation is in progress") only echo it."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    plain = [e for e in chain if connection_lost(e)
             and not isinstance(e, (asyncpg.InterfaceError, asyncpg.InternalClientError))]
    if not plain:
        return "the connection closed under a statement (PostgreSQL restarted or stopped, or the network cut it)"
    first = plain[-1]
    return f"{type(first).__name__}: {first}".strip().rstrip(":")


# How often a statement that PostgreSQL chose as a deadlock's victim is sent again. Its
# transaction was rolled back whole, so sending it again is the same as sending it the
# first time; the other side of the cycle went on when it was cut.
DEADLOCK_TRIES = 5


async def retry_deadlock(db, call: Callable[[], Awaitable[T]]) -> T:
    """`call()` (a transaction of its own: one statement, or one `transaction()` block),
    again when the server broke a deadlock by cutting it. Overlapping claims can meet in
    one: FOR UPDATE SKIP LOCKED skips a row another transaction holds, but a row whose
    holder commits while it is being locked is followed to its newer version, and that
    wait does not skip (docs/reliability.md#deadlocks-between-claims). Inside a caller's
    transaction nothing is retried: the whole transaction is lost, and only the caller
    can run it again. Each retry is logged (a warning), so the rare event can be seen."""
    for attempt in range(1, DEADLOCK_TRIES):
        try:
            return await call()
        except asyncpg.DeadlockDetectedError as exc:
            in_transaction = getattr(db, "is_in_transaction", None)  # a pool never is
            if in_transaction is not None and in_transaction():
                raise
            log.warning("cut by the server to break a deadlock, sent again (try %d of %d): %s",
                        attempt + 1, DEADLOCK_TRIES, str(exc).splitlines()[0])
    return await call()


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


# Every statement here is a prepared, named query whose best plan does not depend on
# its parameter values (key lookups, keyset pages, the claim). Left to choose, PostgreSQL
# re-plans the claim on every call (its custom plan always looks cheaper), which costs
# 0.5-0.9 ms a claim; the generic plan has the same shape (docs/performance.md).
SERVER_SETTINGS = {"plan_cache_mode": "force_generic_plan"}
# asyncpg keeps a prepared statement only up to this size (15 KiB by default): the claim is
# 18 KiB of text, and a statement not kept is parsed and planned again on every call (4 ms
# a claim, half the drain's speed).
MAX_CACHED_STATEMENT_BYTES = 64 * 1024


def _statement_cache(pooled: bool) -> dict:
    """Behind a transaction pooler, consecutive statements may reach different server
    sessions: no named prepared statement (it would be missing on the next session).
    asyncpg then sends each statement's Parse again with its Bind, so every call is planned
    afresh and plan_cache_mode has nothing to cache (docs/deploy.md#behind-a-connection-pooler)."""
    return {"statement_cache_size": 0} if pooled else {"max_cacheable_statement_size": MAX_CACHED_STATEMENT_BYTES}


def _options(pooled: bool) -> dict:
    """The pools' options; behind a pooler no startup parameter either (PgBouncer refuses
    unknown ones)."""
    if pooled:
        return _statement_cache(pooled)
    return {"server_settings": SERVER_SETTINGS, **_statement_cache(pooled)}


async def create_pool(dsn: str, size: int = 10, *, pooled: bool = False) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=size, init=_init_connection, command_timeout=60, **_options(pooled))


async def connect(dsn: str, *, pooled: bool = False) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, **_statement_cache(pooled))
    await _init_connection(conn)
    return conn
