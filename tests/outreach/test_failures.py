"""Retries with backoff until the crawl gives up; the page then says why."""

from __future__ import annotations


from app.pipeline.stage import Stage
from app.outreach import CRAWL_STAGE
from app.outreach.crawl import discover, lock_pages
from tests.outreach.conftest import campaign, run, seconds_until


async def queue_pages(pool, cid, urls, depth=1):
    async with pool.acquire() as conn, conn.transaction():
        await lock_pages(conn, cid)
        await discover(conn, cid, urls, depth)


async def test_server_errors_back_off_then_give_up_and_the_page_says_so(pool, site):
    cid = await campaign(pool, site.url + "/")
    await pool.execute("DELETE FROM jobs")  # only the page below, not the whole site
    await queue_pages(pool, cid, [f"{site.url}/broken"])
    waits = []
    for attempt in (1, 2, 3):
        result = await run(pool)
        assert (result.jobs_failed, result.jobs_retried) == ((0, 1) if attempt < 3 else (1, 0))
        assert result.error is None
        job = await pool.fetchrow("SELECT * FROM jobs WHERE type = 'crawl'")
        assert job["attempts"] == attempt and job["last_error"] == f"FetchError: HTTP 500 from {site.url}/broken"
        if attempt < 3:
            assert job["status"] == "pending"
            waits.append(round(await seconds_until(pool, job["run_after"]) / 60))
            await pool.execute("UPDATE jobs SET run_after = now()")  # the backoff has passed
    assert waits == [2, 4]  # exponential: 2, then 4 minutes
    assert job["status"] == "failed" and result.summary["stages"]["crawl"]["failed"] == 1
    page = await pool.fetchrow("SELECT * FROM pages WHERE url = $1", f"{site.url}/broken")
    assert page["state"] == "failed" and "HTTP 500" in page["note"]
    assert site.hits("/broken") == 3


async def test_a_retry_after_deferral_does_not_burn_attempts(pool, site):
    cid = await campaign(pool, site.url + "/")
    await pool.execute("DELETE FROM jobs")
    await queue_pages(pool, cid, [f"{site.url}/limited"])
    one_try = [Stage(type="crawl", handler=CRAWL_STAGE.handler, max_attempts=1)]
    for _ in range(3):  # three rate-limited runs, on a stage that allows a single attempt
        result = await run(pool, stages=one_try)
        assert result.jobs_deferred == 1 and result.jobs_failed == 0
        await pool.execute("UPDATE jobs SET run_after = now()")
    job = await pool.fetchrow("SELECT * FROM jobs WHERE type = 'crawl'")
    assert (job["status"], job["attempts"]) == ("pending", 0)
    assert site.hits("/limited") == 3


async def test_bad_payloads_fail_with_a_readable_error(pool):
    from app.engine.jobs import NewJob, enqueue
    bad = await enqueue(pool, NewJob(type="crawl", payload={"url": "ftp://nope"},
                                     lane=await campaign(pool, "http://127.0.0.1:9/")))
    await pool.execute("DELETE FROM jobs WHERE id <> $1", bad)
    await run(pool)
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", bad)
    # no retry can fix a payload: it fails for good on its first attempt
    assert row["status"] == "failed" and row["attempts"] == 1
    assert "not an http(s) URL" in row["last_error"]
