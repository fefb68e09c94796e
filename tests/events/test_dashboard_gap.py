"""The dashboard keeps its cursor behind a gap until it has read /stats again.

It moved its cursor to the gap's `oldest` as the gap arrived, before its refetch returned:
had the refetch failed, the page would have carried on past events it never showed, and on
reconnecting asked only for what came after them. Here /stats fails while the gap comes in:
the cursor stays where it was, and moves on once a read of /stats succeeds."""

from __future__ import annotations

import pytest

from tests.events.conftest import person_enqueues
from tests.events.test_dashboard_browser import CHROMIUM, REPLAY, _open, browser, served  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")


async def test_a_gap_does_not_move_the_cursor_before_stats_is_read_again(pool, browser, served, tenants):
    from playwright.async_api import expect
    a, _, admin = tenants
    page, _, foreign = await _open(browser, served, admin.key)
    before = await page.evaluate("state.cursor")
    assert isinstance(before, int)

    async def fail(route):
        await route.abort()
    await page.route("**/stats", fail)                  # every refetch fails from here
    await served.stop()                                 # the WebSocket drops
    await person_enqueues(pool, a.lane, REPLAY + 3)     # more events than the window pass meanwhile
    await served.start()
    await expect(page.locator("#notice")).to_contain_text("Caught up from a gap", timeout=15_000)
    await page.wait_for_timeout(1_000)                  # the replayed events come in too, and their refetches fail
    assert await page.evaluate("state.cursor") == before
    assert await page.evaluate("state.held") > before

    await page.unroute("**/stats", fail)
    await person_enqueues(pool, a.lane, 1)              # any event makes the page read /stats again
    head = await pool.fetchval("SELECT max(seq) FROM events WHERE room = 'system'")
    await expect(page.locator("#t-ready")).to_have_text(str(REPLAY + 4), timeout=5_000)
    await page.wait_for_function(f"state.held === null && state.cursor >= {head}", timeout=5_000)
    assert foreign == []
