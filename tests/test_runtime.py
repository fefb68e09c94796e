"""The runtime the adapters share: where the database is, for the CLI as for the app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from app.devdb import LocalPostgres
from app.runtime import DatabaseNotConfigured, Runtime
from app.settings import load_settings

REPO = Path(__file__).parent.parent


async def test_the_cli_finds_the_embedded_server_under_local_data_dir(pg_server, tmp_path):
    """DATABASE_URL unset: the CLI uses the embedded server in LOCAL_DATA_DIR (here the test
    session's own), not a .data folder wherever it happens to run."""
    admin = await asyncpg.connect(pg_server)
    try:
        data_dir = Path(await admin.fetchval("SHOW data_directory")).parent
        if not (data_dir / "pgdata" / "postmaster.pid").exists():
            pytest.skip("the test server is not an embedded one on this machine")
        await admin.execute('DROP DATABASE IF EXISTS "skiplock" WITH (FORCE)')
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL")}
        env.update(LOCAL_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO), PIPELINE_STAGES="tests.sample_stages:STAGES")
        done = subprocess.run([sys.executable, "-m", "app", "migrate"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["applied"]  # a fresh `skiplock` database, migrated
        assert await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = 'skiplock'") == 1
        assert not (tmp_path / ".data").exists()
    finally:
        await admin.execute('DROP DATABASE IF EXISTS "skiplock" WITH (FORCE)')
        await admin.close()
        if (tmp_path / ".data" / "pgdata").exists():  # the wrong place: stop what started there
            LocalPostgres(tmp_path / ".data").stop()


async def test_the_app_without_a_database_url_is_not_configured_outside_local_dev():
    runtime = Runtime(load_settings(database_url=None, local_dev=False), [])
    with pytest.raises(DatabaseNotConfigured, match="DATABASE_URL"):
        await runtime.pool()
