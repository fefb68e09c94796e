"""The dashboard's Jobs view in a real browser (Playwright driving chromium, as
test_dashboard_browser.py does): find jobs by filter, page with "Load more", tell ids apart,
open one job's story, act on many with a confirmation that says how many, and see another
person's bulk action live; a tenant's page shows none of another tenant's jobs."""

from __future__ import annotations

import uuid

import pytest

from tests.events.test_dashboard_browser import CHROMIUM, _open, browser, served  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium "
                                                         "(make test does it)")

# Two ids that share their first and their last 8 hex digits: only a longer end tells them apart.
TWINS = ("01900000-0000-7000-8000-0000deadbeef", "01900000-0000-7000-8000-1111deadbeef")


async def _rows(page) -> list[str]:
    return await page.locator("#jobs-table tbody tr[data-found]").evaluate_all(
        "rows => rows.map(r => r.dataset.found)")


async def test_find_a_job_read_its_story_and_act_on_many(pool, browser, served, tenants):  # noqa: F811
    from playwright.async_api import expect
    a, b, admin = tenants
    for twin in TWINS:
        await pool.execute("INSERT INTO jobs (id, type, lane, created_at) VALUES ($1, 'record', $2, "
                           "now() - interval '1 day')", uuid.UUID(twin), a.lane)
    await pool.execute("INSERT INTO jobs (type, lane) SELECT 'record', $1 FROM generate_series(1, 55)", a.lane)
    broken = await pool.fetchval(
        "INSERT INTO jobs (type, lane, status, attempts, last_error, finished_at, payload, errors) "
        "VALUES ('broken', $1, 'failed', 1, 'RuntimeError: the <b>upstream</b> broke', now(), $2, "
        "job_errors_with('[]', 1, 'RuntimeError: the <b>upstream</b> broke', NULL)) RETURNING id",
        a.lane, {"html": "<img src=x onerror=alert(1)>", "n": 1})
    theirs = await pool.fetchval("INSERT INTO jobs (type, lane, status, attempts, last_error, finished_at) "
                                 "VALUES ('broken', $1, 'failed', 1, 'the upstream broke', now()) RETURNING id",
                                 b.lane)

    page, problems, foreign = await _open(browser, served, a.key)
    # a page of the tenant's own jobs, newest first; "Load more" follows the cursor
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(50, timeout=5_000)
    await page.locator("#jobs-more").click()
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(58, timeout=5_000)
    await expect(page.locator("#jobs-more")).to_be_hidden()
    shown = await _rows(page)
    assert str(theirs) not in shown and set(TWINS) <= set(shown)
    # every row's label differs (the twins' too), and the whole id is on hover
    labels = await page.locator("#jobs-table tbody tr[data-found] button.link").all_inner_texts()
    assert len(set(labels)) == len(labels) == 58
    for twin in TWINS:
        opener = page.locator(f'tr[data-found="{twin}"] button.link')
        await expect(opener).to_have_attribute("title", twin)
        assert len(await opener.inner_text()) > 9  # longer than "…" and 8 digits: the ends are equal

    # find by the error's text, in any case, and open the job
    await page.get_by_label("Error contains").fill("UPSTREAM")
    await page.get_by_role("button", name="Find jobs").click()
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(1, timeout=5_000)
    assert await _rows(page) == [str(broken)]
    await page.locator(f'tr[data-found="{broken}"] button.link').press("Enter")
    panel = page.locator("#job-panel")
    await expect(panel).to_be_visible()
    await expect(page.locator("#job-title")).to_be_focused()
    await expect(page.locator("#job-id")).to_have_text(str(broken))
    await expect(page.locator("#job-payload")).to_contain_text('"html": "<img src=x onerror=alert(1)>"')
    assert await panel.locator("img, b").count() == 0  # text, never markup
    await expect(page.locator("#job-errlist li")).to_have_count(1)
    await expect(page.locator("#job-timeline")).to_contain_text("enqueued")
    await expect(page.locator("#job-timeline li").nth(1)).to_contain_text(
        "attempt 1 failed: RuntimeError: the <b>upstream</b> broke")
    await page.get_by_role("button", name="Retry this job").press("Enter")
    await expect(page.locator("#job-title")).to_contain_text("pending", timeout=5_000)
    await expect(page.locator("#job-timeline")).to_contain_text("due (attempt 1)")
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", broken) == "pending"
    await page.get_by_role("button", name="Close").click()

    # an admin's page, open meanwhile, sees the tenant's bulk action live
    watcher, watcher_problems, _ = await _open(browser, served, admin.key)
    twin_row = watcher.locator(f'tr[data-found="{TWINS[0]}"]')
    await watcher.get_by_label("Stage", exact=True).select_option("record")
    await watcher.get_by_role("button", name="Find jobs").click()
    await expect(watcher.locator("#jobs-table tbody tr[data-found]")).to_have_count(50, timeout=5_000)
    await watcher.locator("#jobs-more").click()  # the twins are the oldest: on the second page
    await expect(twin_row).to_contain_text("pending", timeout=5_000)

    # select the twins from the keyboard, cancel them, confirmed by a question that counts them
    await page.get_by_role("button", name="Clear").click()
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(50, timeout=5_000)
    await page.locator("#jobs-more").click()
    for twin in TWINS:
        box = page.locator(f'tr[data-found="{twin}"] input[type="checkbox"]')
        await box.focus()
        await page.keyboard.press("Space")
    await expect(page.locator("#bulk-count")).to_have_text("2 selected")
    await page.get_by_role("button", name="Cancel selected").click()
    await expect(page.locator("#bulk-question")).to_have_text("Cancel 2 selected jobs?")
    await expect(page.get_by_role("button", name="Yes, do it")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#notice")).to_contain_text("Cancelled 2 of 2 jobs", timeout=5_000)
    statuses = await pool.fetch("SELECT status FROM jobs WHERE id = ANY ($1::uuid[])", [uuid.UUID(t) for t in TWINS])
    assert all(r["status"] != "pending" for r in statuses)
    audited = await pool.fetch("SELECT actor_kind, actor_id FROM audit_log WHERE table_name = 'jobs' "
                               "AND row_id = ANY ($1::text[]) AND new_row ->> 'status' <> 'pending'", list(TWINS))
    assert [(r["actor_kind"], r["actor_id"]) for r in audited] == [("user", str(a.user_id))] * 2
    await expect(twin_row).to_contain_text("cancelled", timeout=5_000)  # the admin's page, without a reload

    # "all that match": the question counts what a dry run found; Back changes nothing
    await page.get_by_label("Stage", exact=True).select_option("record")
    await page.get_by_role("button", name="Find jobs").click()
    # the filter is the one the list shows: wait for it (the retried `broken` is pending too)
    await expect(page.locator(f'tr[data-found="{broken}"]')).to_have_count(0, timeout=5_000)
    await page.get_by_role("button", name="Cancel all that match").click()
    await expect(page.locator("#bulk-question")).to_have_text("Cancel 55 pending jobs that match this filter?")
    await page.get_by_role("button", name="Back").click()
    await expect(page.locator("#bulk-confirm")).to_be_hidden()
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending' AND type = 'record'") == 55

    await page.locator(f'tr[data-found] button.link').first.click()
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is wider than {width} px by {overflow} px"
    assert problems == [] and watcher_problems == [] and foreign == []


async def test_a_bad_filter_says_what_is_wrong_on_the_page(pool, browser, served, tenants):  # noqa: F811
    from playwright.async_api import expect
    a, _, _ = tenants
    page, _, _ = await _open(browser, served, a.key)
    await page.get_by_label("Lane", exact=True).fill("not-a-lane")
    await page.get_by_role("button", name="Find jobs").click()
    await expect(page.locator("#jobs-error")).to_contain_text("lane: must be a UUID", timeout=5_000)


async def test_retry_all_that_match_takes_the_tenants_own_jobs_only(pool, browser, served, tenants):  # noqa: F811
    from playwright.async_api import expect
    a, b, _ = tenants
    for lane in (a.lane, a.lane, a.lane, b.lane):
        await pool.execute("INSERT INTO jobs (type, lane, status, attempts, last_error, finished_at) "
                           "VALUES ('record', $1, 'failed', 1, 'RuntimeError: no', now())", lane)
    page, problems, _ = await _open(browser, served, a.key)
    await page.get_by_label("Status").select_option("failed")
    await page.get_by_role("button", name="Find jobs").click()
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(3, timeout=5_000)
    await page.get_by_role("button", name="Retry all that match").click()
    await expect(page.locator("#bulk-question")).to_have_text("Retry 3 failed jobs that match this filter?")
    await page.get_by_role("button", name="Yes, do it").click()
    await expect(page.locator("#notice")).to_contain_text("Retried 3 of 3 jobs", timeout=5_000)
    await expect(page.locator("#jobs-table tbody tr[data-found]")).to_have_count(0, timeout=5_000)  # live
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1 AND status = 'pending'", a.lane) == 3
    assert await pool.fetchval("SELECT status FROM jobs WHERE lane = $1", b.lane) == "failed"
    assert problems == []
