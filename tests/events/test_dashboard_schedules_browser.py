"""The dashboard's Stages card shows each periodic stage's schedule, in a real browser
(Playwright on Debian's chromium, as tests/events/test_dashboard_browser.py)."""

from __future__ import annotations

import shutil

import pytest

from app import Stage
from app.api import create_app
from app.pipeline.maintenance import schedule_periodic
from tests.api.serving_kit import make_settings, start_uvicorn

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")


async def noop(job, ctx) -> None:
    return None


STAGES = [Stage(type="plain", handler=noop),
          Stage(type="hourly", handler=noop, every=3600),
          Stage(type="weekdays", handler=noop, cron="0 3 * * MON-FRI", tz="Europe/Berlin")]


async def test_the_stages_card_shows_each_schedule(pool, dsn, tenants):
    from playwright.async_api import async_playwright, expect
    await schedule_periodic(pool, STAGES[1:2])  # the hourly one has a last period, the other none yet
    app = create_app(make_settings(dsn), stages=STAGES)
    server, task, sock = await start_uvicorn(app)
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = await browser.new_page()
            problems = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(f"http://127.0.0.1:{sock.getsockname()[1]}/dashboard")
            await page.get_by_label("API key").fill(tenants[0].key)  # a tenant's key reads them too
            await page.get_by_role("button", name="Open the dashboard").click()
            weekdays = page.locator('tr[data-stage="weekdays"]')
            await expect(weekdays).to_contain_text("0 3 * * MON-FRI (Europe/Berlin)", timeout=10_000)
            await expect(weekdays).to_contain_text("last never, next ")
            hourly = page.locator('tr[data-stage="hourly"]')
            await expect(hourly).to_contain_text("every 60 min")
            await expect(hourly).not_to_contain_text("last never")
            await expect(page.locator('tr[data-stage="plain"] td').nth(1)).to_have_text("–")
            assert problems == []
            await browser.close()
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
