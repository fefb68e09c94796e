"""Connections: an asyncpg pool whose connections speak JSON for jsonb."""

from __future__ import annotations

import json

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=size, init=_init_connection, command_timeout=60)


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn
