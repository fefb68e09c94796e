"""Fixtures for the live events and the dashboard: tenants with lanes, API keys, a way
to make events the way people do (a write that names an actor), and the app served by a
real uvicorn on a free port."""

from __future__ import annotations

import uuid

import httpx
import pytest

from app.api import create_app
from app.engine.accounts import KEY_SHAPE, revoke_key
from app.engine.tenancy import Actor, acting
from app.pipeline.stage import Stage
from tests.api.serving_kit import make_settings, start_uvicorn
from tests.factories import tenant

PERSON = Actor("system", "tests")  # a named actor: what the CLI or psql with an actor is


async def noop(job, ctx) -> None:
    return None


async def broken(job, ctx) -> None:
    raise RuntimeError("the handler broke")


STAGES = [Stage(type="record", handler=noop, batch=10, lease=60, timeout=10),
          Stage(type="broken", handler=broken, batch=10, lease=60, timeout=10, max_attempts=1)]


@pytest.fixture
async def tenants(pool):
    """(a, b, admin): two tenants with a lane each, and an admin."""
    return (await tenant(pool, "a@example.com"), await tenant(pool, "b@example.com"),
            await tenant(pool, "root@example.com", admin=True))


async def revoke(pool, key: str) -> bool:
    """Revoke an API key as `skiplock key revoke` does (a named actor); whether it was live."""
    async with acting(pool, PERSON) as conn:
        return await revoke_key(conn, KEY_SHAPE.match(key).group(1))


def pool_getter(pool):
    """What EventHub takes for its pool (the runtime hands its pool over lazily)."""
    async def get():
        return pool
    return get


async def person_enqueues(pool, lane: uuid.UUID, n: int = 1, type_: str = "record") -> None:
    """`n` statements, one job each, by a named actor: n 'jobs.created' events in the lane's
    room (and its owner's, and 'system')."""
    for i in range(n):
        async with acting(pool, PERSON) as conn:
            await conn.execute("INSERT INTO jobs (type, lane, payload) VALUES ($1, $2, $3)",
                               type_, lane, {"i": i})


@pytest.fixture
async def serve(dsn):
    """serve(**settings) -> (app, base_url): the app on a real uvicorn; stopped afterwards."""
    running = []

    async def start(**overrides):
        app = create_app(make_settings(dsn, **overrides), stages=STAGES)
        server, task, sock = await start_uvicorn(app)
        running.append((app, server, task, sock))
        return app, f"127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for app, server, task, sock in running:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()


@pytest.fixture
async def client(dsn):
    """An httpx client on the app in-process (EVENTS_REPLAY=5), no key by default."""
    app = create_app(make_settings(dsn, events_replay=5), stages=STAGES)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test") as c:
        yield c
    await app.state.runtime.close()
