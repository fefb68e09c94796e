"""While PostgreSQL restarts or is stopped, the API answers 503 `database_unavailable` in
the error shape, never a 500, and serves again once it is back.

A fast restart says goodbye on every pooled connection; a request caught between that
goodbye and the socket closing used to fail inside asyncpg ("cannot switch to state 15;
another operation (2) is in progress") and come back as a 500 (found by `make chaos`).
The server here is a PostgreSQL of the test's own: the session's is never restarted."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest
from serving_kit import make_settings

from app import Stage
from app.api import create_app
from app.api.errors import database_gone
from app.engine.db import create_pool
from app.plugin import load_plugins
from app.settings import Settings
from tests.factories import api_key
from tests.own_server import migrated_server, pg_ctl


@pytest.fixture
async def own_server():
    async with migrated_server("skiplock-down-", load_plugins(Settings().pipeline_plugins)) \
            as (server, dsn, port):
        pool = await create_pool(dsn, size=1)
        try:
            key = await api_key(pool, "down@example.com", admin=True)
        finally:
            await pool.close()
        yield server, dsn, key, port


async def _noop(job, ctx) -> None:
    return None


async def test_restart_and_stop_answer_503_never_500(own_server):
    server, dsn, key, port = own_server
    app = create_app(make_settings(dsn, db_pool_size=8), [Stage(type="t", handler=_noop)])
    answers: list[tuple[str, int, dict | None]] = []
    stop = asyncio.Event()

    async def client_loop(client: httpx.AsyncClient, n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            requests = [("POST", "/jobs", {"json": {"type": "t", "payload": {}}}),
                        ("GET", "/jobs?limit=2", {}),
                        # through the Idempotency-Key middleware, outside the routes' handlers
                        ("POST", "/jobs", {"json": {"type": "t", "payload": {"i": i}},
                                           "headers": {"Idempotency-Key": f"k-{n}-{i}"}})]
            for method, path, kw in requests:
                r = await client.request(method, path, **kw)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
                answers.append((f"{method} {path}", r.status_code, body))

    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            loops = [asyncio.create_task(client_loop(client, n)) for n in range(4)]
            await asyncio.sleep(0.3)  # every loop has a pooled connection, in use or idle
            await asyncio.to_thread(pg_ctl, server, "-m", "fast", "restart")
            await asyncio.sleep(0.3)
            await asyncio.to_thread(pg_ctl, server, "-m", "fast", "stop")
            stopped_at = len(answers)
            await asyncio.sleep(0.3)
            down = answers[stopped_at + 8:]  # past the requests already in flight at the stop
            await asyncio.to_thread(pg_ctl, server, "start", "-o", f"-c listen_addresses=127.0.0.1 -p {port} "
                                    "-c unix_socket_directories='' -c fsync=off")
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*loops)
            back = await client.get("/jobs?limit=1")

    wrong = [a for a in answers if a[1] >= 500 and not (
        a[1] == 503 and a[2] and a[2]["error"]["code"] == "database_unavailable")]
    assert not wrong, wrong[:5]
    assert down and all(a[1] == 503 for a in down), down[:5]  # stopped: every answer a 503
    assert {a[1] for a in answers} >= {200, 201, 503}
    assert back.status_code == 200  # and serving again once the database is back


def test_only_a_cut_connection_counts_as_the_database_gone():
    assert database_gone(asyncpg.InternalClientError("cannot switch to state 15; another operation (2) "
                                                     "is in progress"))
    assert database_gone(asyncpg.InterfaceError("cannot perform operation: connection is closed"))
    assert database_gone(asyncpg.AdminShutdownError("terminating connection due to administrator command"))
    # the driver's other errors are bugs of ours: they stay 500s
    assert not database_gone(asyncpg.InterfaceError("the server expects 8 arguments for this query, 5 were passed"))
    assert not database_gone(asyncpg.InterfaceError("cannot perform operation: another operation is in progress"))
    assert not database_gone(asyncpg.UniqueViolationError("duplicate key"))
