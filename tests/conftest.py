"""One real PostgreSQL for the whole test session.

TEST_DATABASE_URL (or DATABASE_URL) names a server to use; otherwise an embedded
server is started in a temporary folder and stopped at the end. Each test starts
from empty tables."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import asyncpg
import pytest

from app.devdb import LocalPostgres
from app.engine.db import connect, create_pool
from app.engine.migrate import migrate
from app.plugin import load_plugins
from app.settings import Settings
from tests.tenant_login import drop_tenant_login, make_tenant_login, new_login

EXAMPLE_TESTS = Path(__file__).resolve().parent / "outreach"
_EXAMPLE_LEFT_OUT = pytest.StashKey[bool]()


def _given(config) -> list[Path]:
    """The paths this session was given (node ids' files)."""
    here = config.invocation_params.dir
    return [(here / arg.split("::")[0]).resolve() for arg in config.args]


def pytest_ignore_collect(collection_path, config):
    """The example plug-in's tests run as a session of their own, with its tables and
    routes (`make test` runs both): the queue's tests run without any plug-in."""
    given = _given(config)
    if collection_path == EXAMPLE_TESTS and not all(p.is_relative_to(EXAMPLE_TESTS) for p in given):
        # said at the end when a path given holds them (`tests`), not when passed on the way
        # or left out by --ignore
        ignored = [Path(p).resolve() for p in config.getoption("ignore") or []]
        config.stash[_EXAMPLE_LEFT_OUT] = EXAMPLE_TESTS not in ignored and any(
            EXAMPLE_TESTS.is_relative_to(p) for p in given)
        return True
    return None


def pytest_terminal_summary(terminalreporter, config):
    if config.stash.get(_EXAMPLE_LEFT_OUT, False):
        terminalreporter.write_line("tests/outreach (the example plug-in's tests) runs as a session of its own, "
                                    "with the plug-in loaded: pytest tests/outreach (make test runs both)")


def _admin_dsn_and_server():
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        return url, None
    folder = Path(tempfile.mkdtemp(prefix="skiplock-test-"))
    server = LocalPostgres(folder, fast=True)
    port = server.start()
    return server.dsn(port), (server, folder)


@pytest.fixture(scope="session")
def pg_server():
    admin_dsn, owned = _admin_dsn_and_server()
    yield admin_dsn
    if owned:
        server, folder = owned
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def dsn(pg_server):
    """A fresh, migrated database for this session, with its tenant login (tests/tenant_login.py)."""
    admin = await asyncpg.connect(pg_server)
    name = f"skiplock_test_{os.getpid()}"
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.execute(SCHEMA_FIRST.format(name=name))
    await admin.close()
    base, _, _ = pg_server.rpartition("/")
    url = f"{base}/{name}"
    conn = await connect(url)
    await migrate(conn, load_plugins(Settings().pipeline_plugins))
    await make_tenant_login(conn, url)
    await conn.close()
    _session_database.append(url)
    yield url
    _session_database.clear()
    if _cleaner:
        await _cleaner.pop().close()
    admin = await asyncpg.connect(pg_server)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await drop_tenant_login(admin, url)
    await admin.close()


@pytest.fixture
async def new_database(pg_server):
    """Make empty databases of their own (unmigrated) for a test: `await new_database()`
    gives one's URL. Dropped afterwards."""
    admin = await asyncpg.connect(pg_server)
    made: list[str] = []

    async def make() -> str:
        made.append(f"skiplock_scratch_{os.getpid()}_{len(made)}_{os.urandom(3).hex()}")
        await admin.execute(f'CREATE DATABASE "{made[-1]}"')
        await admin.execute(SCHEMA_FIRST.format(name=made[-1]))
        return f"{pg_server.rpartition('/')[0]}/{made[-1]}"
    try:
        yield make
    finally:
        for name in made:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture(scope="session")
async def pool(dsn):
    p = await create_pool(dsn, size=20)
    yield p
    await p.close()


# The tests' databases put the queue's schema first for every session, their own raw
# connections included, as the product's URLs do (app.runtime.in_schema); a test of the
# schema itself makes a database without it (tests/test_own_schema.py).
SCHEMA_FIRST = 'ALTER DATABASE "{name}" SET search_path = skiplock, public'

_all_tables: list[str] = []  # read once: the schema does not change mid-session
_session_database: list[str] = []  # the session database's URL, once `dsn` has made it
_cleaner: list[asyncpg.Connection] = []  # clean's own connection to it


@pytest.fixture(autouse=True)
async def clean(request):
    """Empty every table (every migration's, without a list to keep up) before each test
    that touches the database. An autouse fixture is set up before the test's own, so it
    asks for no fixture: one made from here would need the running loop. Before `dsn` has
    made the session database there is nothing to empty."""
    if not _session_database or ("pool" not in request.fixturenames and "dsn" not in request.fixturenames):
        yield
        return
    if not _cleaner:
        _cleaner.append(await connect(_session_database[0]))
    if not _all_tables:
        _all_tables.append(await _cleaner[0].fetchval(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
            "WHERE schemaname = current_schema() AND tablename <> 'schema_migrations'"))
    await _cleaner[0].execute(f"TRUNCATE {_all_tables[0]} CASCADE")
    yield


@pytest.fixture
async def admin_key(pool) -> str:
    """An admin API key (it sees every tenant), made after the tables were emptied."""
    from tests.factories import api_key
    return await api_key(pool, "admin@example.com", admin=True)


@pytest.fixture
def admin_headers(admin_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {admin_key}"}


@pytest.fixture
async def unfit_login(pool, dsn):
    """make(grant) -> the URL of a fresh login role given `grant` (say, more than a tenant
    login may have), dropped afterwards; the test is skipped where roles cannot be made."""
    made = []

    async def make(grant: str) -> str:
        name = f"skiplock_unfit_{os.getpid()}_{len(made)}"
        try:
            url = await new_login(pool, dsn, name, grant)
        except asyncpg.InsufficientPrivilegeError:
            pytest.skip("this server's test role may not create roles")
        made.append(name)
        return url

    yield make
    for name in made:
        await pool.execute(f"DROP ROLE IF EXISTS {name}")
