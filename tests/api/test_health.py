"""GET /health/live and /health/ready."""

from __future__ import annotations

import asyncpg
from serving_kit import assert_error, free_socket, make_settings


async def test_live_needs_nothing(make_client, via):
    client = await make_client(make_settings(None, cron_secret=None), [], via=via)
    r = await client.get("/health/live")
    assert r.status_code == 200
    assert r.json() == {"status": "live"}


async def test_ready_when_reachable_and_migrated(make_client, via, dsn):
    client = await make_client(make_settings(dsn), [], via=via)
    r = await client.get("/health/ready")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"


async def test_not_ready_when_migrations_are_missing(make_client, pg_server):
    admin = await asyncpg.connect(pg_server)
    name = "skiplock_unmigrated_health"
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        base, _, _ = pg_server.rpartition("/")
        client = await make_client(make_settings(f"{base}/{name}"), [])
        error = assert_error(await client.get("/health/ready"), 503, "not_ready")
        assert "migration" in error["message"]
        assert error["details"]["pendingMigrations"][0] == "0013_queue"  # the queue's chain first
        await client.aclose()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_not_ready_when_the_database_is_unreachable(make_client, via):
    with free_socket() as sock:
        url = f"postgresql://postgres@127.0.0.1:{sock.getsockname()[1]}/none"
        client = await make_client(make_settings(url), [], via=via)
        error = assert_error(await client.get("/health/ready"), 503, "not_ready")
    assert error["details"] == {"database": "unreachable"}


async def test_not_ready_without_database_url(make_client):
    client = await make_client(make_settings(None), [])
    error = assert_error(await client.get("/health/ready"), 503, "not_ready")
    assert "DATABASE_URL" in error["message"]
