"""A real PgBouncer in transaction mode in front of the session's test server
(tests/pgbouncer.py), with a server pool of 2 so that clients share server sessions."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.pgbouncer import PgBouncer, pgbouncer_binary


@pytest.fixture(scope="session")
def pgbouncer(pg_server):
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (make test installs it as root: apt-get install pgbouncer)")
    folder = Path(tempfile.mkdtemp(prefix="skiplock-pgbouncer-"))
    bouncer = PgBouncer(folder, pg_server, pool_size=2)
    bouncer.start()
    yield bouncer
    bouncer.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def pooled_dsn(pgbouncer, dsn) -> str:
    """The session's database through the pooler."""
    return pgbouncer.dsn(dsn.rpartition("/")[2])
