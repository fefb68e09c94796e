"""Who a transaction acts for: the audit triggers read the actor, and row-level
security reads the tenant. All settings are transaction-local (SET LOCAL), so nothing
survives on a pooled connection after commit or rollback."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

import asyncpg

from app.engine.queries import query

ACTOR_KINDS = ("user", "admin", "system", "pipeline")


@dataclass(frozen=True)
class Actor:
    kind: str                      # user | admin | system | pipeline
    id: str | None = None          # who: a user id, "cli", ...
    user_id: uuid.UUID | None = None  # the tenant (for user and admin keys: the key's owner)
    email: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTOR_KINDS:
            raise ValueError(f"actor kind must be one of {', '.join(ACTOR_KINDS)}")

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"


SYSTEM = Actor("system", "app")


async def act_as(conn: asyncpg.Connection, actor: Actor) -> None:
    """Inside a transaction: name the actor (and tenant) for what follows."""
    await conn.execute(query("act_as"), actor.kind, actor.id, actor.user_id)


async def act_as_default(conn: asyncpg.Connection, actor: Actor = SYSTEM) -> None:
    """Inside a transaction: name `actor` unless someone already is named."""
    await conn.execute(query("act_as_default"), actor.kind, actor.id)


async def enter_tenant(conn: asyncpg.Connection, actor: Actor) -> None:
    """Inside a transaction: become the RLS-bound role skiplock_api, for `actor`."""
    await conn.execute(query("act_as_tenant"), actor.kind, actor.id, actor.user_id)


@asynccontextmanager
async def tenant_transaction(pool, actor: Actor) -> AsyncIterator[asyncpg.Connection]:
    """A connection in a transaction that sees only `actor`'s rows (all rows for an admin)."""
    async with pool.acquire() as conn, conn.transaction():
        await enter_tenant(conn, actor)
        yield conn


@asynccontextmanager
async def acting(pool, actor: Actor) -> AsyncIterator[asyncpg.Connection]:
    """A transaction as the connection's own role, with `actor` named for the audit log."""
    async with pool.acquire() as conn, conn.transaction():
        await act_as(conn, actor)
        yield conn
