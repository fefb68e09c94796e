"""A PostgreSQL of a test's own, for tests that restart or stop it: the session's server
is never restarted under the other tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Sequence

from app.devdb import SYSTEM_USER, LocalPostgres, _bin_dir
from app.engine.db import connect
from app.engine.migrate import migrate
from app.plugin import Plugin
from tests.conftest import SCHEMA_FIRST


@asynccontextmanager
async def migrated_server(prefix: str, plugins: Sequence[Plugin]) -> AsyncIterator[tuple[LocalPostgres, str, int]]:
    """A fresh server with the queue's migrations and `plugins`' chains; (server, dsn, port)."""
    # Not under tmp_path: as root the server's user must traverse every parent.
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    server = LocalPostgres(folder, fast=True)
    port = await asyncio.to_thread(server.start)
    try:
        dsn = server.dsn(port)
        conn = await connect(dsn)
        try:
            # as every test database: the queue's schema first (tests/conftest.py)
            await conn.execute(SCHEMA_FIRST.format(name="postgres"))
            await conn.execute("SET search_path = skiplock, public")
            await migrate(conn, list(plugins))
        finally:
            await conn.close()
        yield server, dsn, port
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(folder, ignore_errors=True)


def pg_ctl(server: LocalPostgres, *args: str) -> None:
    """pg_ctl on the server's data folder (as its system user when we are root)."""
    subprocess.run([str(_bin_dir() / "pg_ctl"), "-D", str(server.data_dir / "pgdata"), "-l",
                    str(server.log_path), "-w", *args],
                   check=True, capture_output=True, **({"user": SYSTEM_USER} if os.geteuid() == 0 else {}))
