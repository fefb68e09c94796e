"""Connections: an asyncpg pool whose connections speak JSON for jsonb."""

from __future__ import annotations

import json

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


# Every statement here is a prepared, named query whose best plan does not depend on
# its parameter values (key lookups, keyset pages, the claim). Left to choose, PostgreSQL
# re-plans the claim on every call (its custom plan always looks cheaper), which costs
# 0.5-0.9 ms a claim; the generic plan has the same shape (docs/performance.md).
SERVER_SETTINGS = {"plan_cache_mode": "force_generic_plan"}


async def create_pool(dsn: str, size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=size, init=_init_connection, command_timeout=60,
        server_settings=SERVER_SETTINGS)


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn
