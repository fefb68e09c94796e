"""A campaign's crawl waits for its brief (enqueued `after` it): it starts once the brief is
done, and a brief that fails for good cancels it, so nothing of the site is crawled."""

from __future__ import annotations

from dataclasses import replace

from app.outreach import BRIEF_STAGE, STAGES
from tests.outreach.conftest import campaign, pages, run


async def brief_and_crawl(pool, campaign_id) -> dict:
    """The campaign's brief and the crawl that waits for it (the home page's)."""
    rows = await pool.fetch("SELECT * FROM jobs WHERE lane = $1 AND (type = 'brief' OR parents IS NOT NULL)",
                            campaign_id)
    assert len(rows) == 2, rows
    return {r["type"]: r for r in rows}


async def test_the_home_pages_crawl_waits_for_the_brief_then_crawls_the_site(pool, site):
    cid = await campaign(pool, site.url + "/")
    jobs = await brief_and_crawl(pool, cid)
    assert (jobs["brief"]["status"], jobs["crawl"]["status"]) == ("pending", "waiting")
    assert jobs["crawl"]["parents"] == [jobs["brief"]["id"]]
    assert jobs["crawl"]["payload"] == {"url": site.url + "/"}
    assert await pages(pool, cid) == {}  # the home page is recorded when its crawl runs

    result = await run(pool)
    assert result.error is None
    jobs = await brief_and_crawl(pool, cid)
    assert (jobs["brief"]["status"], jobs["crawl"]["status"]) == ("done", "done")
    assert jobs["brief"]["finished_at"] <= jobs["crawl"]["finished_at"]
    got = await pages(pool, cid)
    assert (got[site.url + "/"]["state"], got[site.url + "/"]["depth"]) == ("fetched", 0)
    assert got[site.url + "/contacts"]["state"] == "fetched"  # the crawl went on from there
    assert site.hits("/") == 2  # the brief's fetch and the crawl's


async def test_a_brief_that_fails_for_good_cancels_the_crawl(pool, site):
    cid = await campaign(pool, site.url + "/broken")
    one_try = [replace(s, max_attempts=1) if s is BRIEF_STAGE else s for s in STAGES]
    result = await run(pool, stages=one_try)
    assert result.error is None and result.jobs_failed == 1
    jobs = await brief_and_crawl(pool, cid)
    assert jobs["brief"]["status"] == "failed" and "HTTP 500" in jobs["brief"]["last_error"]
    assert jobs["crawl"]["status"] == "cancelled" and str(jobs["brief"]["id"]) in jobs["crawl"]["last_error"]
    assert await pages(pool, cid) == {}
    assert site.hits("/broken") == 1  # the brief's fetch, and no crawl's
