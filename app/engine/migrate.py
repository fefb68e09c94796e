"""Apply the schema migrations once each, in one transaction, under an advisory lock.

Two kinds of chain, applied in this order:
  * the queue's: sql/migrations/NNNN_name.sql, recorded as "NNNN_name";
  * each loaded plug-in's: <its SQL folder>/migrations/NNNN_name.sql (Plugin.sql; none if
    it declares no folder or the folder has no migrations/), recorded as "<plug-in>/NNNN_name".

A database made before the split (the queue and the outreach example in one chain, kept
unchanged in sql/migrations/legacy/) is recognised by a legacy version in its record: the
rest of that chain runs, then legacy/bridge.sql turns its end state into the split one,
data included, and the squashed files it stands for (its "-- records:" line) are recorded
as applied, whichever plug-ins are loaded: the legacy chain made their tables either way.
Everything after them runs as on any database. A fresh database never sees the legacy chain.

Everything goes into the schema the connection's search_path names first (DATABASE_SCHEMA,
default skiplock; app.runtime puts it in the database URL), made if missing. A database
whose queue is still in public is brought up to date there, then its objects move into
that schema (migration 0038's relocate_from_public): the names the migrations create.
"""

from __future__ import annotations

import re
from importlib.resources.abc import Traversable
from typing import Iterable, Protocol

import asyncpg

from app.engine.queries import SQL_DIR, statement

LEGACY_DIR = SQL_DIR / "migrations" / "legacy"
BRIDGE = (LEGACY_DIR / "bridge.sql").read_text(encoding="utf-8")


class PluginSql(Protocol):
    """What migrating needs of a plug-in (app.plugin.Plugin has it): the name that prefixes
    its versions, and its SQL folder."""
    @property
    def name(self) -> str: ...
    @property
    def sql(self) -> Traversable | None: ...


def _bridge_records(bridge: str) -> tuple[str, ...]:
    """The versions the bridge stands for, from its "-- records: v1 v2 ..." line."""
    for line in bridge.splitlines():
        if line.startswith("-- records:"):
            return tuple(line.removeprefix("-- records:").split())
    raise ValueError("legacy/bridge.sql has no '-- records:' line")


# The squashed first files of the split chains that the bridge stands for.
SQUASHED = _bridge_records(BRIDGE)


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, str]]:
    """(version, sql) of each NNNN_name.sql in the folder, in order; none if it is missing."""
    if not folder.is_dir():
        return []
    # package data (app.sql) has no glob: NNNN_name.sql is a name starting with a digit
    names = sorted(f.name for f in folder.iterdir()
                   if f.is_file() and f.name[:1].isdigit() and f.name.endswith(".sql"))
    return [(prefix + n.removesuffix(".sql"), (folder / n).read_text(encoding="utf-8")) for n in names]


def chain(plugins: Iterable[PluginSql]) -> list[tuple[str, str]]:
    """The queue's migrations, then each plug-in's, in order."""
    steps = _files(SQL_DIR / "migrations")
    for plugin in plugins:
        if plugin.sql is not None:
            steps += _files(plugin.sql / "migrations", f"{plugin.name}/")
    return steps


def _plan(done: set[str], plugins: Iterable[PluginSql]) -> list[tuple[str, tuple[str, ...]]]:
    """(sql, versions it records) for each step still to run, in order."""
    steps: list[tuple[str, tuple[str, ...]]] = []
    legacy = _files(LEGACY_DIR)
    if done & {v for v, _ in legacy} and not done.issuperset(SQUASHED):
        steps += [(sql, (v,)) for v, sql in legacy if v not in done]
        steps.append((BRIDGE, SQUASHED))
        done = done | set(SQUASHED)
    steps += [(sql, (v,)) for v, sql in chain(plugins) if v not in done]
    return steps


# A function's own search_path and the API role's schema grant, written for public in the
# migrations, name the schema they run in.
_IN_PUBLIC = re.compile(r"\bsearch_path = public, pg_temp\b|\bON SCHEMA public\b")
# What a migration creates (or renames to): the names relocate_from_public moves.
_CREATES = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:MATERIALIZED\s+)?"
                      r"(?:TABLE|VIEW|FUNCTION|PROCEDURE|SEQUENCE|TYPE|DOMAIN)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                      r"(?:public\.)?([a-z_][a-z0-9_]*)|\bRENAME\s+TO\s+([a-z_][a-z0-9_]*)", re.IGNORECASE)


def for_schema(sql: str, schema: str) -> str:
    """A migration's text for the schema it runs in."""
    return _IN_PUBLIC.sub(lambda m: m.group(0).replace("public", f'"{schema}"'), sql)


def created_names(plugins: Iterable[PluginSql]) -> list[str]:
    """Every name the queue's migrations (the legacy chain's too) and the plug-ins' create."""
    texts = [sql for _, sql in [*_files(LEGACY_DIR), *chain(plugins)]] + [BRIDGE]
    names = {m.group(1) or m.group(2) for t in texts for m in _CREATES.finditer(t)}
    return sorted({n.lower() for n in names} | {"schema_migrations"})


async def migrate(conn: asyncpg.Connection, plugins: Iterable[PluginSql]) -> list[str]:
    """Apply what is missing of the queue's chain and the loaded plug-ins' (PIPELINE_PLUGINS's)
    in the connection's schema; return the versions recorded now. Safe to run concurrently."""
    plugins = list(plugins)
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute(*statement("migrations_lock").bind())
        target = await conn.fetchval(*statement("migrations_schema").bind())
        in_public_still = await conn.fetchval(*statement("migrations_old_layout").bind(schema=target))
        run_in = "public" if in_public_still else target
        await conn.fetchval(*statement("migrations_in_schema").bind(schema=run_in))
        await conn.execute(*statement("migrations_make_schema").bind())
        await conn.execute(*statement("migrations_prepare").bind())
        done = {r["version"] for r in await conn.fetch(*statement("migrations_applied").bind())}
        for sql, versions in _plan(done, plugins):
            await conn.execute(for_schema(sql, run_in))
            for version in versions:
                await conn.execute(*statement("migrations_record").bind(version=version))
            applied_now += versions
        names = created_names(plugins)
        if in_public_still:
            await conn.fetchval(*statement("migrations_in_schema").bind(schema=target))
            await conn.execute(*statement("migrations_make_schema").bind())
            await conn.fetchval(*statement("migrations_relocate").bind(names=names, schema=target))
        if applied_now or in_public_still:
            await conn.fetchval(*statement("migrations_pin").bind(names=names, schema=target))
    return applied_now


async def pending_migrations(conn: asyncpg.Connection, plugins: Iterable[PluginSql]) -> list[str]:
    """Versions not yet applied (all of the chains on an empty database)."""
    exists = await conn.fetchval(*statement("migrations_table_exists").bind())
    done = set()
    if exists:
        done = {r["version"] for r in await conn.fetch(*statement("migrations_applied").bind())}
    return [v for _, versions in _plan(done, list(plugins)) for v in versions]
