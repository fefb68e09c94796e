"""Fixtures for the example pipeline: the test site and a fake LLM served on 127.0.0.1
for the whole session, settings that fit a test (short fetch timeout), and helpers.
(The root conftest's `clean` empties every table before each test, these included.)

The egress guard refuses loopback, so a test site is reachable only while `reachable()`
lists its exact 127.0.0.1:port in the settings' FETCH_ALLOW_PRIVATE."""

from __future__ import annotations

import os

# The example's tests run with the example loaded: its tables in the session's database
# (tests/conftest.py migrates what PIPELINE_PLUGINS names), its routes and commands.
os.environ["PIPELINE_PLUGINS"] = "app.outreach.plugin:PLUGIN"

from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import AsyncIterator

import httpx
import pytest

from app.api import create_app
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from app.outreach.settings import OutreachSettings, load_outreach_settings, using_outreach_settings
from app.outreach import STAGES
from app.outreach.campaigns import add_campaign
from tests.outreach import factories as f
from tests.outreach.servers import FakeLlm, Recorder, ServerThread, site_app
from tests.tenant_login import tenant_login_url


@dataclass
class Site:
    url: str
    rec: Recorder

    def hits(self, path: str) -> int:
        return self.rec.count(path)


_REACHABLE: set[str] = set()  # host:port of the test servers running now that fetches may reach


@contextmanager
def reachable(server: ServerThread):
    """Start `server` and list it in FETCH_ALLOW_PRIVATE (of `settings()`) while it runs."""
    with server:
        address = f"127.0.0.1:{server.port}"
        _REACHABLE.add(address)
        try:
            yield server
        finally:
            _REACHABLE.discard(address)


@pytest.fixture(scope="session")
def _site_server():
    app, rec = site_app()
    with reachable(ServerThread(app)) as server:
        yield Site(server.url, rec)


@pytest.fixture
def site(_site_server):
    _site_server.rec.clear()
    return _site_server


@pytest.fixture(scope="session")
def _llm_server():
    fake = FakeLlm()
    with ServerThread(fake.app()) as server:
        yield fake, server.url


@pytest.fixture
def llm(_llm_server):
    fake, url = _llm_server
    fake.reset()
    fake.url = url
    return fake


OUTREACH_FIELDS = frozenset(OutreachSettings.model_fields)


def settings(**overrides):
    """The queue's settings for a test; the example's are `example_settings`."""
    misplaced = OUTREACH_FIELDS & overrides.keys()
    assert not misplaced, f"{sorted(misplaced)} are the example's settings: pass them to run() or example_settings()"
    base = dict(database_url="postgresql://unused", fetch_allow_private=",".join(sorted(_REACHABLE)),
                tenant_database_url=tenant_login_url(overrides.get("database_url")))
    return load_settings(**{**base, **overrides})


def example_settings(**overrides) -> OutreachSettings:
    """The example's settings for a test: a short fetch timeout, small pages, no LLM."""
    # 1.5 s: short enough for the tests that wait out a silent server (it sleeps 2 s), long
    # enough that a loaded machine (two test processes) does not time out a live local one
    base = dict(fetch_timeout_seconds=1.5, fetch_max_bytes=2048, llm_base_url=None, llm_model=None,
                llm_api_key=None)
    return load_outreach_settings(**{**base, **overrides})


@asynccontextmanager
async def api_client(dsn: str, timeout: float = 5.0, **overrides) -> AsyncIterator[httpx.AsyncClient]:
    """The app with the example's routes (no scheduler), over ASGI; `overrides`: the
    queue's settings."""
    app = create_app(settings(database_url=dsn, run_scheduler=False, **overrides))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                 timeout=timeout) as client:
        yield client
    await app.state.runtime.close()


@pytest.fixture
async def api(dsn):
    async with api_client(dsn) as client:
        yield client


@pytest.fixture
async def admin_key(pool) -> str:
    """An admin API key, its owner on the pro plan."""
    return await f.api_key(pool, "admin@example.com", admin=True, plan="pro")


@pytest.fixture(autouse=True)
def _example_settings_in_use():
    """Every test here reads example_settings() unless it puts others in place."""
    with using_outreach_settings(example_settings()):
        yield


async def run(pool, trigger: str = "manual", stages=None, **overrides):
    """One pipeline run; `overrides` may name the queue's settings and the example's."""
    example = {name: overrides.pop(name) for name in list(overrides) if name in OUTREACH_FIELDS}
    with using_outreach_settings(example_settings(**example)):
        return await Pipeline(pool, stages or STAGES, settings(**overrides)).run(trigger)


async def campaign(pool, url: str, plan: str = "pro", owner: str | None = None):
    made = await add_campaign(pool, url, owner=owner or f"{plan}-{url.rsplit(':', 1)[-1]}@example.com",
                              plan=plan)
    return made["id"]


async def pages(pool, campaign_id) -> dict:
    rows = await pool.fetch("SELECT * FROM pages WHERE campaign_id = $1", campaign_id)
    return {r["url"]: r for r in rows}


async def jobs_by(pool, type_: str) -> dict:
    rows = await pool.fetch("SELECT * FROM jobs WHERE type = $1", type_)
    return {r["payload"].get("url", str(r["id"])): r for r in rows}


async def seconds_until(pool, when) -> float:
    return await pool.fetchval("SELECT extract(epoch FROM $1::timestamptz - now())::float8", when)
