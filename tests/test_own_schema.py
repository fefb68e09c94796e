"""The queue lives in a schema of its own (DATABASE_SCHEMA, default skiplock), beside an
app's tables in public, in a database whose sessions default to public as any app's do:
migrate makes the schema, every command finds its tables there, a plain INSERT from a
session of the app's fires the queue's triggers, and a queue made before in public moves
across with its data (docs/adopt.md#a-schema-of-its-own)."""

from __future__ import annotations

import json
import os

import asyncpg

from tests.test_migrate_cli import installed

STAGES = {"PIPELINE_STAGES": "tests.sample_stages:STAGES"}


async def _app_database(new_database, table: str = "users") -> str:
    """A database as an app has it: a table of its own in public (by default `users`, which
    the queue has too), sessions on public."""
    url = await new_database()
    db = await asyncpg.connect(url)
    try:
        await db.execute("ALTER DATABASE " + url.rpartition("/")[2] + " RESET search_path")
        await db.execute(f"CREATE TABLE public.{table} (id serial PRIMARY KEY, name text NOT NULL)")
        await db.execute(f"INSERT INTO public.{table} (name) VALUES ('the app''s own')")
    finally:
        await db.close()
    return url


async def _tables(url: str, schema: str) -> set[str]:
    db = await asyncpg.connect(url)
    try:
        return {r[0] for r in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)}
    finally:
        await db.close()


def _ok(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_the_queue_keeps_to_its_schema_beside_the_apps_tables(new_database, tmp_path):
    url = await _app_database(new_database)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _ok(installed("migrate", cwd=root, dsn=url, env=STAGES))
    assert {"jobs", "runs", "users", "lanes", "schema_migrations"} <= await _tables(url, "skiplock")
    assert await _tables(url, "public") == {"users"}

    created = _ok(installed("enqueue", "echo", "--payload", '{"text": "hi"}', cwd=root, dsn=url, env=STAGES))
    assert created["created"] is True
    # the app's session (search_path public) enqueues with a plain INSERT: the triggers
    # resolve the queue's tables in its schema, whoever calls them
    app = await asyncpg.connect(url)
    try:
        assert await app.fetchval("SHOW search_path") == '"$user", public'
        await app.execute("INSERT INTO skiplock.jobs (type, payload) VALUES ('echo', '{\"text\": \"yo\"}')")
        assert await app.fetchval("SELECT name FROM users") == "the app's own"
    finally:
        await app.close()
    ran = _ok(installed("run-once", cwd=root, dsn=url, env=STAGES))
    assert ran["stopReason"] == "no_work" and ran["jobsDone"] == 2


async def test_a_schema_of_another_name(new_database):
    url = await _app_database(new_database)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _ok(installed("migrate", cwd=root, dsn=url, env={**STAGES, "DATABASE_SCHEMA": "background"}))
    assert "jobs" in await _tables(url, "background") and not await _tables(url, "skiplock")
    bad = installed("migrate", cwd=root, dsn=url, env={**STAGES, "DATABASE_SCHEMA": "Drop Table"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "DATABASE_SCHEMA" in bad.stderr


async def test_a_queue_made_in_public_moves_into_its_schema_with_its_data(new_database):
    from app.engine.migrate import migrate

    url = await _app_database(new_database, "orders")  # a `users` of its own could not be there
    db = await asyncpg.connect(url)  # sessions on public: migrated as before there was a schema
    try:
        await migrate(db, [])
        assert "jobs" in await _tables(url, "public")
        await db.execute("INSERT INTO jobs (type) SELECT 'echo' FROM generate_series(1, 3)")
    finally:
        await db.close()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _ok(installed("migrate", cwd=root, dsn=url, env=STAGES))
    assert await _tables(url, "public") == {"orders"}  # only the app's own is left in public
    assert {"jobs", "job_lanes", "schema_migrations"} <= await _tables(url, "skiplock")
    ran = _ok(installed("run-once", cwd=root, dsn=url, env=STAGES))
    assert ran["jobsDone"] == 3
    db = await asyncpg.connect(url)
    try:  # no function of the queue is left behind in public; pg_trgm's (an extension, which
        # migration 0066 adds where the search_path pointed then) stay where it was made
        left = await db.fetch("SELECT proname FROM pg_proc p WHERE pronamespace = 'public'::regnamespace "
                              "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass "
                              "AND d.objid = p.oid AND d.deptype = 'e')")
        assert left == [], left
        assert await db.fetchval("SELECT extnamespace::regnamespace::text FROM pg_extension "
                                 "WHERE extname = 'pg_trgm'") == "public"
    finally:
        await db.close()
