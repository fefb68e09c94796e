"""`make run`'s embedded PostgreSQL (app.devdb) asks every connection for a password, even
from this machine; a data directory from before that (which trusted every local
connection) is switched over when it is next used, while its server keeps running."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import asyncpg
import pytest

from app.devdb import SUPERUSER, LocalPostgres, _bin_dir, local_database_url, without_password


@pytest.fixture
def folder():
    # Not under pytest's tmp_path: as root the server's user must traverse every parent.
    path = Path(tempfile.mkdtemp(prefix="skiplock-devdb-"))
    yield path
    LocalPostgres(path).stop()
    shutil.rmtree(path, ignore_errors=True)


async def refused(port: int, password: str | None) -> bool:
    try:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user=SUPERUSER, database="postgres",
                                     password=password)
    except asyncpg.InvalidPasswordError:
        return True
    await conn.close()
    return False


async def test_a_new_server_needs_the_password_kept_in_the_data_folder(folder):
    server = LocalPostgres(folder, fast=True)
    port = server.start()
    kept = server.password_path
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert len(kept.read_text().strip()) >= 32
    assert await refused(port, None) and await refused(port, "postgres") and await refused(port, "")
    conn = await asyncpg.connect(server.dsn(port))
    assert await conn.fetchval("SELECT current_user") == SUPERUSER
    await conn.close()
    assert not server.trusts_connections()
    assert not list(folder.glob(".initdb*"))  # the copy initdb read is gone


async def test_a_server_left_running_from_a_trusting_data_directory_is_switched_over(folder):
    server = LocalPostgres(folder, fast=True)
    if os.geteuid() == 0:
        server._prepare_root()  # the server's own user must own the folder
    # the data directory an earlier version made: every local connection trusted
    subprocess.run([str(_bin_dir() / "initdb"), "-D", str(folder / "pgdata"), "-U", SUPERUSER, "--auth=trust",
                    "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions", "--no-sync"],
                   check=True, capture_output=True, **server._run_as())
    port = server.start()
    assert server.trusts_connections() and not await refused(port, None)  # the hole

    dsn = await local_database_url(folder)  # what make run does: reuse the server, use it
    assert server.running_port() == port  # the same server, never restarted
    assert await refused(port, None) and await refused(port, "wrong")
    conn = await asyncpg.connect(dsn)
    assert await conn.fetchval("SELECT current_database()") == "skiplock"
    await conn.close()

    # for good (pg_hba.conf itself says so now), and the next make run finds nothing to do
    assert not server.trusts_connections()
    assert await local_database_url(folder) == dsn


def test_the_password_is_never_shown_in_a_dsn_printed_for_a_person():
    assert without_password("postgresql://postgres:s3cr-et_@127.0.0.1:5432/skiplock") == \
        "postgresql://postgres:***@127.0.0.1:5432/skiplock"
    assert without_password("postgresql://app@db.example/skiplock") == "postgresql://app@db.example/skiplock"
