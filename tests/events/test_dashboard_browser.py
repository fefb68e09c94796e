"""The dashboard in a real browser: Playwright driving Debian's chromium, headless,
against the app on a real uvicorn and the test database. Skipped (with how to install
it) when chromium is missing; `make test` installs it.

Set SKIPLOCK_SCREENSHOTS=1 to write docs/dashboard-1280.png and docs/dashboard-390.png."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import httpx
import pytest

from app.api import create_app
from app.api import events as events_api
from app.plugin import Plugin
from tests.api.serving_kit import make_settings, start_uvicorn
from tests.events.conftest import STAGES, person_enqueues, revoke

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")
DOCS = Path(__file__).resolve().parents[2] / "docs"
REPLAY = 5


async def _tiers_panel(db, actor, settings) -> list[dict]:
    return [{"title": "Tiers", "columns": ["Tier", "Queue"], "rows": [["Gold", "First in line"]]}]


PANEL_PLUGIN = Plugin(name="panels", dashboard=_tiers_panel)  # a plug-in's panel on the dashboard


@pytest.fixture
async def browser():
    from playwright.async_api import async_playwright
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        await b.close()


class Served:
    """The app on a fixed port, which can be stopped and started again (a WebSocket drop)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.base = f"http://127.0.0.1:{self.port}"
        self.current = None

    async def start(self) -> None:
        app = create_app(make_settings(self.dsn, events_replay=REPLAY), stages=STAGES, plugins=[PANEL_PLUGIN])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.current = (app, *await start_uvicorn(app, sock))

    async def stop(self) -> None:
        app, server, task, sock = self.current
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
        self.current = None


@pytest.fixture
async def served(dsn):
    s = Served(dsn)
    await s.start()
    yield s
    if s.current is not None:
        await s.stop()


async def _open(browser, served, key, width=1280):
    page = await browser.new_page(viewport={"width": width, "height": 1000})
    problems, foreign = [], []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: None if r.url.startswith((served.base, f"ws://127.0.0.1:{served.port}"))
            or r.url.startswith("data:") else foreign.append(r.url))
    await page.goto(f"{served.base}/dashboard")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Open the dashboard").click()
    await page.locator("#live", has_text="Live").wait_for(timeout=10_000)
    return page, problems, foreign


async def test_dashboard_live_retry_and_layout(pool, browser, served, tenants):
    from playwright.async_api import expect
    a, _, admin = tenants
    await pool.execute("INSERT INTO jobs (type, lane, status, attempts, last_error, finished_at) "
                       "VALUES ('broken', $1, 'failed', 1, 'RuntimeError: the handler broke', now())", a.lane)
    failed_id = str(await pool.fetchval("SELECT id FROM jobs WHERE status = 'failed'"))
    page, problems, foreign = await _open(browser, served, admin.key)
    row = page.locator(f'tr[data-job="{failed_id}"]')
    await expect(row).to_contain_text("the handler broke")
    await expect(page.locator("#t-ready")).to_have_text("0")

    # a job enqueued through the API shows up without a reload
    async with httpx.AsyncClient(base_url=served.base, headers=admin.headers) as api:
        response = await api.post("/jobs", json={"type": "record", "lane": str(a.lane)})
        assert response.status_code == 201, response.text
    await expect(page.locator('tr[data-type="record"] td').first).to_have_text("1", timeout=2_000)
    await expect(page.locator("#t-ready")).to_have_text("1", timeout=2_000)

    # Retry, from the keyboard: the failed job is pending again
    # every failed attempt of a job, from its row
    await pool.execute("UPDATE jobs SET errors = job_errors_with(errors, 1, 'RuntimeError: <b>first</b>', NULL) "
                       "WHERE id = $1", failed_id)
    await page.get_by_role("button", name=f"Errors of job …{failed_id.replace('-', '')[-8:]}").click()
    await expect(page.locator("#job-errors li")).to_have_count(1, timeout=5_000)
    await expect(page.locator("#job-errors")).to_contain_text("attempt 1")
    await expect(page.locator("#job-errors")).to_contain_text("RuntimeError: <b>first</b>")  # as text, escaped
    # a job is named by the end of its id: jobs enqueued together share the start
    await page.get_by_role("button", name=f"Retry job …{failed_id.replace('-', '')[-8:]}").focus()
    await page.keyboard.press("Enter")
    await expect(row).to_have_count(0, timeout=5_000)
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", failed_id) == "pending"
    await expect(page.locator("#t-ready")).to_have_text("2", timeout=5_000)
    # an operator pauses a stage from its row, and resumes it
    await page.get_by_role("button", name="Pause stage record").click()
    await expect(page.locator('tr[data-stage="record"]')).to_contain_text("paused since", timeout=5_000)
    assert await pool.fetchval("SELECT count(*) FROM paused_stages WHERE type = 'record'") == 1
    await page.get_by_role("button", name="Resume stage record").click()
    await expect(page.locator('tr[data-stage="record"]')).to_contain_text("running", timeout=5_000)
    assert await pool.fetchval("SELECT count(*) FROM paused_stages") == 0
    # a plug-in's panel renders
    await expect(page.get_by_role("heading", name="Tiers")).to_be_visible()
    await expect(page.get_by_text("First in line")).to_be_visible()

    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 1000})
        overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is wider than {width} px by {overflow} px"
        if os.environ.get("SKIPLOCK_SCREENSHOTS"):
            await page.screenshot(path=str(DOCS / f"dashboard-{width}.png"), full_page=width == 390)
    assert problems == [] and foreign == []


async def test_catches_up_from_a_gap_after_the_socket_drops(pool, browser, served, tenants):
    from playwright.async_api import expect
    a, _, admin = tenants
    page, _, foreign = await _open(browser, served, admin.key)
    await served.stop()                                 # the WebSocket drops
    await person_enqueues(pool, a.lane, REPLAY + 3)     # more events than the window pass meanwhile
    await served.start()
    notice = page.locator("#notice")
    await expect(notice).to_contain_text("Caught up from a gap", timeout=15_000)
    ready = await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending' AND run_after <= now()")
    assert ready == REPLAY + 3
    await expect(page.locator("#t-ready")).to_have_text(str(ready), timeout=5_000)
    await expect(page.locator('tr[data-type="record"] td').first).to_have_text(str(ready))
    assert foreign == []


async def test_a_revoked_key_logs_the_page_out(pool, browser, served, tenants, monkeypatch):
    """The stream closes with 4401 once the key is revoked: the page goes back to its login
    and says why, instead of reconnecting with the dead key for ever."""
    from playwright.async_api import expect

    monkeypatch.setattr(events_api, "RECHECK_SECONDS", 1.0)
    a, _, _ = tenants
    page, _, _ = await _open(browser, served, a.key)
    assert await revoke(pool, a.key)
    await expect(page.locator("#login-error")).to_contain_text("no longer valid", timeout=10_000)
    await expect(page.get_by_label("API key")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0  # the key is not kept


async def test_the_dashboard_works_mounted_under_a_prefix(pool, browser, dsn, tenants):
    """An app that mounts Skiplock at /queue (docs/adopt.md, shape A): the page, its script
    and style sheet, /stats and the live WebSocket are all found under the prefix."""
    from fastapi import FastAPI
    from playwright.async_api import expect
    a, _, admin = tenants
    await pool.execute("INSERT INTO jobs (type, lane) VALUES ('record', $1)", a.lane)
    skiplock = create_app(make_settings(dsn, events_replay=REPLAY), stages=STAGES)
    team = FastAPI()
    team.mount("/queue", skiplock)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server, task, _ = await start_uvicorn(team, sock)
    try:
        base = f"http://127.0.0.1:{port}"
        page = await browser.new_page(viewport={"width": 1280, "height": 1000})
        problems, outside = [], []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith((f"{base}/queue/", f"ws://127.0.0.1:{port}/queue/"))
                or r.url.startswith("data:") else outside.append(r.url))
        await page.goto(f"{base}/queue/dashboard")
        await page.get_by_label("API key").fill(admin.key)
        await page.get_by_role("button", name="Open the dashboard").click()
        await page.locator("#live", has_text="Live").wait_for(timeout=10_000)  # the WebSocket, under /queue
        await expect(page.locator('tr[data-type="record"] td').first).to_have_text("1")  # /queue/stats
        assert problems == [] and outside == [], (problems, outside)
    finally:
        server.should_exit = True
        await task
        sock.close()
        await skiplock.state.runtime.close()
