"""A real PgBouncer in transaction mode in front of the session's test server
(tests/pgbouncer.py), with a server pool of 2 so that clients share server sessions."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.pgbouncer import PgBouncer, pgbouncer_binary
from tests.tenant_login import tenant_login_url


@pytest.fixture(scope="session")
def pgbouncer(pg_server, dsn):
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (make test installs it as root: apt-get install pgbouncer)")
    folder = Path(tempfile.mkdtemp(prefix="skiplock-pgbouncer-"))
    tenant = tenant_login_url(dsn)  # the session's tenant login may come through as well
    bouncer = PgBouncer(folder, pg_server, pool_size=2, also=(tenant,) if tenant else ())
    bouncer.start()
    yield bouncer
    bouncer.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def pooled_dsn(pgbouncer, dsn) -> str:
    """The session's database through the pooler."""
    return pgbouncer.dsn(dsn.rpartition("/")[2])


@pytest.fixture(scope="session")
async def pooled_tenant_dsn(pgbouncer, dsn) -> str | None:
    """The session's database through the pooler as its tenant login (None: there is none)."""
    tenant = tenant_login_url(dsn)
    return pgbouncer.dsn(dsn.rpartition("/")[2], tenant) if tenant else None
