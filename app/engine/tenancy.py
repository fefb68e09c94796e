"""Who a transaction acts for: the audit triggers read the actor, and row-level
security reads the tenant. All settings are transaction-local (SET LOCAL), so nothing
survives on a pooled connection after commit or rollback.

A tenant transaction (an API request's) runs as a role that does not own the tables:
skiplock_admin for an admin key, skiplock_api otherwise. Its tenant is not a setting the
role could change but the API key it presents (prefix and digest), which the database
checks against api_keys on every query; the role cannot read the stored digests."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator

import asyncpg

from app.engine.queries import statement

ACTOR_KINDS = ("user", "admin", "system", "pipeline")


@dataclass(frozen=True)
class KeyProof:
    """What a transaction presents to act for an API key's owner: the key's prefix and
    the SHA-256 digest of the whole key (never the key itself)."""
    prefix: str
    digest: str = field(repr=False)


@dataclass(frozen=True)
class Actor:
    kind: str                      # user | admin | system | pipeline
    id: str | None = None          # who: a user id, "cli", ...
    user_id: uuid.UUID | None = None  # the tenant (for user and admin keys: the key's owner)
    email: str | None = None
    key: KeyProof | None = None    # for user and admin actors: the key they came with

    def __post_init__(self) -> None:
        if self.kind not in ACTOR_KINDS:
            raise ValueError(f"actor kind must be one of {', '.join(ACTOR_KINDS)}")

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"


SYSTEM = Actor("system", "app")


async def act_as(conn: asyncpg.Connection, actor: Actor) -> None:
    """Inside a transaction: name the actor for what follows (as the connection's own role)."""
    await conn.execute(*statement("act_as").bind(actor_kind=actor.kind, actor_id=actor.id))


async def act_as_default(conn: asyncpg.Connection, actor: Actor = SYSTEM) -> None:
    """Inside a transaction: name `actor` unless someone already is named."""
    await conn.execute(*statement("act_as_default").bind(actor_kind=actor.kind, actor_id=actor.id))


async def enter_tenant(conn: asyncpg.Connection, actor: Actor, *,
                       statement_timeout_ms: int | None = None) -> None:
    """Inside a transaction: become skiplock_api (skiplock_admin for an admin), presenting
    `actor`'s key; with `statement_timeout_ms`, each statement of the rest of the
    transaction is cancelled after that long (asyncpg.QueryCanceledError). Without a key
    there is no tenant to enter."""
    if actor.key is None or actor.kind not in ("user", "admin"):
        raise ValueError("a tenant transaction needs a user or admin actor with its API key "
                         "(app.engine.accounts.authenticate makes one)")
    if statement_timeout_ms is not None and statement_timeout_ms < 1:
        raise ValueError("statement_timeout_ms must be at least 1 (None: keep the one in force)")
    timeout = None if statement_timeout_ms is None else str(statement_timeout_ms)
    await conn.execute(*statement("act_as_tenant").bind(
        actor_kind=actor.kind, actor_id=actor.id, key_prefix=actor.key.prefix,
        key_digest=actor.key.digest, statement_timeout_ms=timeout))


@asynccontextmanager
async def tenant_transaction(pool, actor: Actor, *,
                             statement_timeout_ms: int | None = None) -> AsyncIterator[asyncpg.Connection]:
    """A connection in a transaction that sees only `actor`'s rows (all rows for an admin),
    each statement limited as enter_tenant's `statement_timeout_ms` says."""
    async with pool.acquire() as conn, conn.transaction():
        await enter_tenant(conn, actor, statement_timeout_ms=statement_timeout_ms)
        yield conn


@asynccontextmanager
async def acting(pool, actor: Actor) -> AsyncIterator[asyncpg.Connection]:
    """A transaction as the connection's own role, with `actor` named for the audit log."""
    async with pool.acquire() as conn, conn.transaction():
        await act_as(conn, actor)
        yield conn
