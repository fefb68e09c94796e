"""Fixtures for the serving layer: injected stages, and clients that reach the app
through httpx.ASGITransport or through a real uvicorn on a free port.

The database is the real one from tests/conftest.py (`dsn`, `pool`)."""

from __future__ import annotations

import httpx
import pytest
from serving_kit import Recorder, make_settings, start_uvicorn

from app.api import create_app
from app.pipeline.stage import Stage
from app.settings import Settings


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def make_client(dsn, admin_headers):
    """make(settings=None, stages=None, via="asgi"|"uvicorn") -> httpx.AsyncClient on the app."""
    made = []
    servers = []

    async def make(settings: Settings | None = None, stages: list[Stage] | None = None,
                   via: str = "asgi", api_key: bool = True) -> httpx.AsyncClient:
        """api_key: send an admin API key by default (the tenant routes need one)."""
        headers = admin_headers if api_key else None
        app = create_app(settings or make_settings(dsn), stages)
        if via == "asgi":
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                       headers=headers)
        else:
            server, task, sock = await start_uvicorn(app)
            servers.append((server, task, sock))
            client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=30,
                                       headers=headers)
        made.append((app, client))
        return client

    yield make
    for app, client in made:
        await client.aclose()
    for server, task, sock in servers:
        server.should_exit = True
        await task
        sock.close()
    for app, _ in made:
        await app.state.runtime.close()


@pytest.fixture(params=["asgi", "uvicorn"])
def via(request) -> str:
    """Run a test through httpx.ASGITransport and through a real uvicorn."""
    return request.param
