"""Apply the schema migrations once each, in one transaction, under an advisory lock.

Two kinds of chain, applied in this order:
  * the queue's: sql/migrations/NNNN_name.sql, recorded as "NNNN_name";
  * each named plug-in's: sql/<plug-in>/migrations/NNNN_name.sql (an optional folder),
    recorded as "<plug-in>/NNNN_name".

A database made before the split (the queue and the outreach example in one chain, kept
unchanged in sql/migrations/legacy/) is recognised by a legacy version in its record: the
rest of that chain runs, then legacy/bridge.sql turns its end state into the split one,
data included, and the squashed files it stands for are recorded as applied. Everything
after them runs as on any database. A fresh database never sees the legacy chain.
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from typing import Iterable

import asyncpg

from app.engine.queries import SQL_DIR, query

LEGACY_DIR = SQL_DIR / "migrations" / "legacy"
# What legacy/bridge.sql stands for: the squashed first files of the queue's chain and of
# the outreach plug-in's chain (the legacy chain made the example's tables too, so a
# database made before the split has them whether or not it still names the plug-in).
SQUASHED = ("0013_queue", "outreach/0001_outreach")


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, str]]:
    """(version, sql) of each NNNN_name.sql in the folder, in order; none if it is missing."""
    if not folder.is_dir():
        return []
    # package data (app.sql) has no glob: NNNN_name.sql is a name starting with a digit
    names = sorted(f.name for f in folder.iterdir()
                   if f.is_file() and f.name[:1].isdigit() and f.name.endswith(".sql"))
    return [(prefix + n.removesuffix(".sql"), (folder / n).read_text(encoding="utf-8")) for n in names]


def chain(plugins: Iterable[str]) -> list[tuple[str, str]]:
    """The queue's migrations, then each plug-in's (by plug-in name), in order."""
    steps = _files(SQL_DIR / "migrations")
    for name in plugins:
        steps += _files(SQL_DIR / name / "migrations", f"{name}/")
    return steps


def _plan(done: set[str], plugins: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(sql, versions it records) for each step still to run, in order."""
    steps: list[tuple[str, tuple[str, ...]]] = []
    legacy = _files(LEGACY_DIR)
    if done & {v for v, _ in legacy} and SQUASHED[0] not in done:
        steps += [(sql, (v,)) for v, sql in legacy if v not in done]
        steps.append(((LEGACY_DIR / "bridge.sql").read_text(encoding="utf-8"), SQUASHED))
        done = done | set(SQUASHED)
    steps += [(sql, (v,)) for v, sql in chain(plugins) if v not in done]
    return steps


async def migrate(conn: asyncpg.Connection, plugins: Iterable[str]) -> list[str]:
    """Apply what is missing of the queue's chain and the named plug-ins' (PIPELINE_PLUGINS's
    names); return the versions recorded now. Safe to run concurrently."""
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute(query("migrations_lock"))
        await conn.execute(query("migrations_prepare"))
        done = {r["version"] for r in await conn.fetch(query("migrations_applied"))}
        for sql, versions in _plan(done, list(plugins)):
            await conn.execute(sql)
            for version in versions:
                await conn.execute(query("migrations_record"), version)
            applied_now += versions
    return applied_now


async def pending_migrations(conn: asyncpg.Connection, plugins: Iterable[str]) -> list[str]:
    """Versions not yet applied (all of the chains on an empty database)."""
    exists = await conn.fetchval(query("migrations_table_exists"))
    done = set()
    if exists:
        done = {r["version"] for r in await conn.fetch(query("migrations_applied"))}
    return [v for _, versions in _plan(done, list(plugins)) for v in versions]
