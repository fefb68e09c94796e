"""The dashboard's Lanes card pauses and resumes a lane for an admin (and offers nothing to a
tenant), and the Stages card shows each stage's limits, in a real browser (Playwright on
Debian's chromium, as tests/events/test_dashboard_browser.py)."""

from __future__ import annotations

import shutil

import pytest

from app import Stage
from app.api import create_app
from tests.api.serving_kit import make_settings, start_uvicorn

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")


async def noop(job, ctx) -> None:
    return None


STAGES = [Stage(type="plain", handler=noop),
          Stage(type="keyed", handler=noop, batch=5, concurrency=5, global_concurrency=3, rate=(5, 2),
                limit_by="payload.account_id"),
          Stage(type="capped", handler=noop, global_concurrency=2),
          Stage(type="rated", handler=noop, batch=1, concurrency=1, rate=(10, 0.5))]


def short(id_) -> str:
    return "…" + str(id_).replace("-", "")[-8:]


async def _open(browser, base, key):
    page = await browser.new_page(viewport={"width": 1280, "height": 1000})
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    await page.goto(f"{base}/dashboard")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Open the dashboard").click()
    await page.locator("#live", has_text="Live").wait_for(timeout=10_000)
    return page, problems


async def test_an_admin_pauses_a_lane_and_sees_each_stages_limits(pool, dsn, tenants):
    from playwright.async_api import async_playwright, expect
    a, _, admin = tenants
    await pool.execute("INSERT INTO jobs (type, lane) VALUES ('plain', $1)", a.lane)  # open work: a busiest lane
    app = create_app(make_settings(dsn), stages=STAGES)
    server, task, sock = await start_uvicorn(app)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page, problems = await _open(browser, base, admin.key)
            row = page.locator(f'tr[data-lane="{a.lane}"]')
            await expect(row.locator("td").nth(4)).to_have_text("", timeout=5_000)
            await page.get_by_role("button", name=f"Pause lane {short(a.lane)}").click()
            await expect(row.locator("td").nth(4)).to_have_text("paused", timeout=5_000)
            await expect(page.locator("#notice")).to_contain_text(f"Lane {short(a.lane)}: paused.")
            assert await pool.fetchval("SELECT paused FROM lanes WHERE id = $1", a.lane) is True
            audited = await pool.fetch("SELECT actor_kind, actor_id, op, new_row->>'paused' AS paused FROM audit_log "
                                       "WHERE table_name = 'lanes' AND row_id = $1 AND actor_kind <> 'system' "
                                       "ORDER BY id", str(a.lane))
            assert [(r["actor_kind"], r["op"], r["paused"]) for r in audited] == [("admin", "UPDATE", "true")]
            # the keyboard resumes it
            await page.get_by_role("button", name=f"Resume lane {short(a.lane)}").focus()
            await page.keyboard.press("Enter")
            await expect(row.locator("td").nth(4)).to_have_text("", timeout=5_000)
            assert await pool.fetchval("SELECT paused FROM lanes WHERE id = $1", a.lane) is False
            assert await pool.fetchval("SELECT count(*) FROM audit_log WHERE table_name = 'lanes' AND row_id = $1 "
                                       "AND actor_kind = 'admin'", str(a.lane)) == 2

            # each stage's limits, in a column of the Stages card
            limits = {t: page.locator(f'tr[data-stage="{t}"] td').nth(2) for t in ("plain", "keyed", "capped", "rated")}
            await expect(limits["plain"]).to_have_text("–")
            await expect(limits["keyed"]).to_have_text("3 at once, 5 starts per 2 s, per payload.account_id")
            await expect(limits["capped"]).to_have_text("2 at once")
            await expect(limits["rated"]).to_have_text("10 starts per 0.5 s")
            assert problems == []

            # a tenant's page sees its lane, paused or not, and no button to change it
            await pool.execute("UPDATE lanes SET paused = true WHERE id = $1", a.lane)
            page, problems = await _open(browser, base, a.key)
            row = page.locator(f'tr[data-lane="{a.lane}"]')
            await expect(row.locator("td").nth(4)).to_have_text("paused", timeout=5_000)
            await expect(row.locator("td").nth(5)).to_have_text("–")
            await expect(page.get_by_role("button", name=f"Resume lane {short(a.lane)}")).to_have_count(0)
            await expect(page.locator('tr[data-stage="keyed"] td').nth(2)).to_contain_text("3 at once")
            assert problems == []
            await browser.close()
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
