"""Apply the ordered migrations in sql/migrations/ once each, under an advisory lock."""

from __future__ import annotations

import asyncpg

from app.engine.queries import migrations, query


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply what is missing; return the versions applied now. Safe to run concurrently."""
    applied_now = []
    async with conn.transaction():
        await conn.execute(query("migrations_lock"))
        await conn.execute(query("migrations_prepare"))
        done = {r["version"] for r in await conn.fetch(query("migrations_applied"))}
        for version, sql in migrations():
            if version in done:
                continue
            await conn.execute(sql)
            await conn.execute(query("migrations_record"), version)
            applied_now.append(version)
    return applied_now


async def pending_migrations(conn: asyncpg.Connection) -> list[str]:
    """Versions not yet applied (all of them on an empty database)."""
    exists = await conn.fetchval(query("migrations_table_exists"))
    done = set()
    if exists:
        done = {r["version"] for r in await conn.fetch(query("migrations_applied"))}
    return [v for v, _ in migrations() if v not in done]
