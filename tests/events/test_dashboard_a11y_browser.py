"""The dashboard's accessibility, checked by machine in a real browser: axe-core run on the
page as an admin and as a tenant, at 1280 and 390 px, with a job's and a batch's panel open,
finds no serious or critical violation; and every control on the page is reached with Tab.

axe-core is vendored for the tests only (tests/events/vendor/axe.min.js, 4.14.1, MPL-2.0;
its SRI hash from the package's sri-history.json is checked below). The app never serves
it: it is evaluated into the page through the browser's DevTools protocol, which the
page's Content-Security-Policy (no inline script) does not govern."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from tests.events.test_dashboard_browser import CHROMIUM, _open, browser, served  # noqa: F401 (fixtures)
from tests.events.test_dashboard_trends_browser import seed_trends_and_a_batch

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")

AXE_FILE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
AXE_SRI = "sha256-KTSJmUUM3yhJqOcLeRL8LahahJ2jnA0NU5T1HUqe2Vw="  # axe-core 4.14.1's axe.min.js
GRAVE = ("serious", "critical")

# Every control a person can operate, shown and enabled, each marked with its place in the page.
MARK_CONTROLS = """() => {
  const all = [...document.querySelectorAll('button, input, select, textarea, a[href], [tabindex]')]
    .filter((e) => e.tabIndex >= 0 && !e.disabled && e.getClientRects().length > 0
                   && getComputedStyle(e).visibility !== 'hidden');
  all.forEach((e, i) => e.dataset.control = String(i));
  return all.map((e) => e.getAttribute('aria-label') || e.textContent.trim() || e.id || e.name);
}"""


def test_the_vendored_axe_is_the_published_one():
    digest = base64.b64encode(hashlib.sha256(AXE_FILE.read_bytes()).digest()).decode()
    assert f"sha256-{digest}" == AXE_SRI


async def _violations(page) -> list[tuple]:
    # the page makes wide tables keyboard-reachable in the frame after a resize or a render
    # (dashboard.js, keyboardScrollSoon): let that frame pass before axe looks
    await page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    if not await page.evaluate("typeof window.axe === 'object'"):
        await page.evaluate(AXE_FILE.read_text())
    result = await page.evaluate("axe.run(document, { resultTypes: ['violations'] })")
    return [(v["id"], v["impact"], v["help"], [n["target"] for n in v["nodes"]][:5])
            for v in result["violations"] if v["impact"] in GRAVE]


async def _open_every_panel(page, batch: str) -> None:
    """The job panel, the batch's panel and a bulk question open: every part axe should see."""
    from playwright.async_api import expect
    await page.locator("#jobs-table tbody tr[data-found] button.link").first.click()
    await expect(page.locator("#job-panel")).to_be_visible(timeout=5_000)
    await page.get_by_role("button", name=f"Open batch …{batch.replace('-', '')[-8:]}").first.click()
    await expect(page.locator("#batch-panel")).to_be_visible(timeout=5_000)
    await page.get_by_role("button", name="Cancel all that match").click()
    await expect(page.locator("#bulk-confirm")).to_be_visible(timeout=5_000)
    await expect(page.locator("#trends-stages figure").first).to_be_visible(timeout=5_000)


@pytest.mark.parametrize("who", ["admin", "tenant"])
async def test_no_serious_or_critical_violation_at_1280_and_390_px(pool, browser, served, tenants, who):  # noqa: F811
    a, b, admin = tenants
    batch = await seed_trends_and_a_batch(pool, a, b)
    page, problems, foreign = await _open(browser, served, admin.key if who == "admin" else a.key)
    await _open_every_panel(page, batch)
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        assert await _violations(page) == [], (who, width)
    # the login form too, before a key is given
    await page.get_by_role("button", name="Log out").click()
    assert await _violations(page) == [], (who, "login")
    assert problems == [] and foreign == []


async def test_every_control_is_reached_with_tab(pool, browser, served, tenants):  # noqa: F811
    a, b, admin = tenants
    batch = await seed_trends_and_a_batch(pool, a, b)
    page, problems, _ = await _open(browser, served, admin.key)
    await _open_every_panel(page, batch)
    await page.get_by_role("button", name="Back").click()  # the question returns focus to its button
    controls = await page.evaluate(MARK_CONTROLS)
    assert len(controls) > 30, controls
    reached = set()
    for _ in range(2 * len(controls) + 10):  # from wherever the focus is, round the page and back
        await page.keyboard.press("Tab")
        reached.add(await page.evaluate("document.activeElement && document.activeElement.dataset.control"))
    missed = [name for i, name in enumerate(controls) if str(i) not in reached]
    assert missed == [], missed
    assert await page.evaluate("[...document.querySelectorAll('[tabindex]')].filter((e) => e.tabIndex > 0).length") == 0
    assert problems == []
