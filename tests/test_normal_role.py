"""A login that owns its database and nothing more migrates and runs once a superuser has
made the two roles (docs/deploy.md#a-normal-database-role), on the oldest PostgreSQL
Skiplock supports and on the embedded one; without them it is told, in one line, which
right it lacks."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import pytest

from app.devdb import LocalPostgres

# Debian's server package, which `make test` installs when missing (root, apt)
OLDEST = Path("/usr/lib/postgresql/15/bin")

RECIPE = """
CREATE ROLE skiplock_api NOLOGIN NOBYPASSRLS;
CREATE ROLE skiplock_admin NOLOGIN NOBYPASSRLS IN ROLE skiplock_api;
GRANT skiplock_api, skiplock_admin TO app_owner;
"""


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_STAGES": "tests.sample_stages:STAGES"}
    env.pop("DATABASE_DIRECT_URL", None)
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(params=["embedded", "15"])
async def server(request):
    if request.param == "15" and not (OLDEST / "postgres").exists():
        pytest.skip("PostgreSQL 15 is not installed (apt-get install postgresql-15; make test does)")
    folder = Path(tempfile.mkdtemp(prefix="skiplock-role-"))
    srv = LocalPostgres(folder, fast=True, bin_dir=OLDEST if request.param == "15" else None)
    port = await asyncio.to_thread(srv.start)
    try:
        yield srv.dsn(port)
    finally:
        await asyncio.to_thread(srv.stop)
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_database_owner_migrates_once_the_roles_exist(server):
    admin = await asyncpg.connect(server)
    await admin.execute("CREATE ROLE app_owner LOGIN PASSWORD 'owner-secret'")
    await admin.execute("CREATE DATABASE app OWNER app_owner")
    host = server.rpartition("@")[2].rpartition("/")[0]
    owner = f"postgresql://app_owner:owner-secret@{host}/app"

    refused = cli(owner, "migrate")
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: permission denied"), refused.stderr
    assert "create role" in lines[0] and "unreachable" not in lines[0], lines[0]
    assert "Traceback" not in refused.stderr

    await admin.execute(RECIPE)
    done = cli(owner, "migrate")
    assert done.returncode == 0, done.stderr
    ran = cli(owner, "run-once")
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert await admin.fetchval("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = 'app_owner'") is False
    await admin.close()


async def test_without_the_right_to_add_pg_trgm_the_error_search_works_unindexed(server):
    """A login with CREATE on its schema but not on the database may not add pg_trgm
    (migration 0066): it migrates all the same, without the trigram index, and the error
    search finds what it found before. The database's owner can add both later."""
    admin = await asyncpg.connect(server)
    await admin.execute("CREATE ROLE app_owner LOGIN PASSWORD 'owner-secret'")
    await admin.execute(RECIPE)
    await admin.execute("CREATE DATABASE app")  # the superuser's, not app_owner's
    host = server.rpartition("@")[2].rpartition("/")[0]
    in_app = await asyncpg.connect(f"{server.rpartition('/')[0]}/app")
    await in_app.execute("CREATE SCHEMA skiplock AUTHORIZATION app_owner")
    owner = f"postgresql://app_owner:owner-secret@{host}/app"

    done = cli(owner, "migrate")
    assert done.returncode == 0, done.stderr
    assert await in_app.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'") == 0
    assert await in_app.fetchval("SELECT to_regclass('skiplock.jobs_error_text_idx')") is None
    as_owner = await asyncpg.connect(owner, server_settings={"search_path": "skiplock"})
    await as_owner.execute("INSERT INTO jobs (type, status, attempts, last_error) "
                           "VALUES ('t', 'failed', 1, 'ValueError: 100%_sure'), ('t', 'failed', 1, 'KeyError: x')")
    from app.engine import job_admin
    rows = await job_admin.list_jobs(as_owner, job_admin.JobFilter(error="0%_S"), None, 50)
    assert [r["last_error"] for r in rows] == ["ValueError: 100%_sure"]
    await as_owner.close()
    await in_app.close()
    await admin.close()
