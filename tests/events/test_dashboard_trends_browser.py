"""The dashboard's Trends card and a batch's panel in a real browser (Playwright driving
chromium, as test_dashboard_browser.py does): per stage, jobs done and failed and their
wait drawn as inline SVG over the last hour or day, the runs by stop reason; a batch's
progress bar and jobs, opened from the Batches card and from a job's panel, from the
keyboard. A tenant's page shows none of another tenant's jobs, and no runs."""

from __future__ import annotations

import pytest

from tests.events.test_dashboard_browser import CHROMIUM, _open, browser, served  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")


async def seed_trends_and_a_batch(pool, a, b) -> str:
    """Jobs that ended over the last hour and day (a's and b's), runs that stopped for
    different reasons, and a batch of a's (priority 4): 3 done, 1 failed, 2 open. Returns the batch's id."""
    for lane, type_, status, minutes, n in ((a.lane, "record", "done", 5, 12), (a.lane, "record", "failed", 5, 2),
                                            (a.lane, "record", "done", 300, 7), (b.lane, "broken", "done", 5, 40)):
        await pool.execute(
            "INSERT INTO jobs (type, lane, status, attempts, finished_at, locked_at, run_after, last_error) "
            "SELECT $1, $2, $3, 1, now() - make_interval(mins => $4), now() - make_interval(mins => $4) "
            "       - interval '1 second', now() - make_interval(mins => $4) - make_interval(secs => 1 + g), "
            "       CASE WHEN $3 = 'failed' THEN 'RuntimeError: boom' END "
            "FROM generate_series(1, $5) g", type_, lane, status, minutes, n)
    await pool.execute("INSERT INTO runs (trigger, started_at, finished_at, stop_reason) "
                       "SELECT 'cron', now() - make_interval(mins => g), now() - make_interval(mins => g), "
                       "(ARRAY['no_work', 'time_budget', 'error'])[1 + g % 3] FROM generate_series(1, 9) g")
    batch = await pool.fetchval("INSERT INTO batches (lane, status) VALUES ($1, 'running') RETURNING id", a.lane)
    await pool.execute(
        "INSERT INTO jobs (type, lane, batch_id, status, attempts, finished_at, last_error, priority) "
        "SELECT 'record', $1, $2, s, (s <> 'pending')::int, CASE WHEN s IN ('done', 'failed') THEN now() END, "
        "       CASE WHEN s = 'failed' THEN 'RuntimeError: no' END, 4 "
        "FROM unnest(ARRAY['done', 'done', 'done', 'failed', 'pending', 'pending']) s", a.lane, batch)
    return str(batch)


async def test_trends_per_stage_and_runs_drawn_and_switched_from_the_keyboard(pool, browser, served, tenants):  # noqa: F811
    from playwright.async_api import expect
    a, b, admin = tenants
    await seed_trends_and_a_batch(pool, a, b)

    page, problems, foreign = await _open(browser, served, a.key)
    record = page.locator('#trends-stages figure[data-stage="record"]')
    # the batch's 3 done and 1 failed ended this minute, the 12 and 2 five minutes ago
    await expect(record).to_contain_text("record 15 done, 3 failed", timeout=5_000)
    assert await record.locator("svg rect.bar-done").count() == 2
    assert await record.locator("svg rect.bar-failed").count() == 2
    assert await record.locator("svg path.line-p50").count() == 1
    await expect(record.locator("svg").first).to_have_attribute(
        "aria-label", "record, the last hour: 15 done, 3 failed; at most 14 a minute")
    await expect(page.locator('#trends-stages figure[data-stage="broken"]')).to_have_count(0)  # b's
    await expect(page.locator("#trends-runs-caption")).to_contain_text("Runs are the operator's")

    # the last day, from the keyboard: a's jobs of five hours ago join
    day = page.get_by_role("button", name="Last day")
    await day.focus()
    await page.keyboard.press("Enter")
    await expect(record).to_contain_text("record 22 done, 3 failed", timeout=5_000)
    await expect(day).to_have_attribute("aria-pressed", "true")
    await expect(page.get_by_role("button", name="Last hour")).to_have_attribute("aria-pressed", "false")
    assert problems == [] and foreign == []

    watcher, watcher_problems, _ = await _open(browser, served, admin.key)
    await expect(watcher.locator('#trends-stages figure[data-stage="broken"]')).to_contain_text("40 done",
                                                                                             timeout=5_000)
    await expect(watcher.locator("#trends-runs-caption")).to_have_text(
        "Runs by why they stopped: 9 runs in the last hour: 3 no_work, 3 time_budget, 0 quota_reserve, "
        "0 quota_exhausted, 3 error")
    assert await watcher.locator("#trends-runs svg rect.bar-error").count() == 3
    assert watcher_problems == []


async def test_a_batchs_panel_from_the_batches_card_and_from_a_jobs_panel(pool, browser, served, tenants):  # noqa: F811
    from playwright.async_api import expect
    a, b, _ = tenants
    batch = await seed_trends_and_a_batch(pool, a, b)
    short = "…" + batch.replace("-", "")[-8:]
    page, problems, foreign = await _open(browser, served, a.key)

    opener = page.get_by_role("button", name=f"Open batch {short}").first
    await opener.focus()
    await page.keyboard.press("Enter")
    panel = page.locator("#batch-panel")
    await expect(panel).to_be_visible()
    await expect(page.locator("#batch-title")).to_be_focused()
    await expect(page.locator("#batch-title")).to_have_text(f"Batch {short}: running")
    await expect(panel.locator("svg")).to_have_attribute("aria-label", "3 done, 1 failed, 0 cancelled of 6 jobs")
    widths = await panel.locator("svg rect").evaluate_all("rs => rs.map(r => [r.classList[0], +r.getAttribute('width')])")
    assert widths == [["bar-open", 600], ["bar-done", 300], ["bar-failed", 100]]
    await expect(panel.locator("#batch-table tbody tr[data-child]")).to_have_count(6)

    # a job of the batch opens its panel; from there, its batch's panel again
    await panel.locator("#batch-table tbody tr[data-child] button.link").first.press("Enter")
    await expect(page.locator("#job-title")).to_be_focused()
    priority = page.locator("#job-facts div", has=page.locator("dt", has_text="Priority")).locator("dd")
    await expect(priority).to_have_text("4")
    await page.locator("#batch-close").press("Enter")
    await expect(panel).to_be_hidden()
    job_panel_batch = page.locator("#job-facts").get_by_role("button", name=f"Open batch {short}")
    await job_panel_batch.press("Enter")
    await expect(page.locator("#batch-title")).to_be_focused()

    # "Show its jobs": the Jobs view filtered to the batch
    await page.get_by_role("button", name="Show its jobs").press("Enter")
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(6, timeout=5_000)
    await expect(page.get_by_label("Batch", exact=True)).to_have_value(batch)
    await expect(page.locator("#jobs-title")).to_be_focused()

    # live: a job of the batch ends, the bar follows without a reload
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() "
                       "WHERE batch_id = $1 AND status = 'pending'", batch)
    await page.get_by_role("button", name="Refresh").click()
    await expect(panel.locator("svg")).to_have_attribute("aria-label", "5 done, 1 failed, 0 cancelled of 6 jobs",
                                                         timeout=5_000)
    assert problems == [] and foreign == []
