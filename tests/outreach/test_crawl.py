"""The crawl against a real site on 127.0.0.1: every outcome lands where it must."""

from __future__ import annotations

from tests.outreach.conftest import campaign, jobs_by, pages, run, seconds_until


async def test_one_run_crawls_the_site_and_records_every_outcome(pool, site):
    cid = await campaign(pool, site.url + "/")
    result = await run(pool)
    assert result.stop_reason == "no_work" and result.error is None
    u = site.url
    got = await pages(pool, cid)

    # 200s are stored; a 404 is recorded and done, not failed
    assert got[f"{u}/contacts"]["state"] == "fetched" and got[f"{u}/contacts"]["status_code"] == 200
    assert got[f"{u}/missing"]["state"] == "fetched" and got[f"{u}/missing"]["status_code"] == 404
    # robots.txt: the staff page is recorded as blocked and never requested
    assert got[f"{u}/private/secret"]["state"] == "blocked" and site.hits("/private/secret") == 0
    # redirects: within the site the content is kept on the page it landed on, once
    assert got[f"{u}/moved"]["state"] == "redirected" and got[f"{u}/moved"]["final_url"] == f"{u}/contacts"
    assert got[f"{u}/old"]["state"] == "redirected" and got[f"{u}/new"]["state"] == "fetched"
    assert site.hits("/new") == 1
    # off the site: not followed, and off-site links are never even discovered
    assert got[f"{u}/away"]["state"] == "skipped" and "offsite.invalid" in got[f"{u}/away"]["note"]
    assert not [url for url in got if "elsewhere.example" in url or "offsite" in url]
    # too large, not text: recorded and skipped
    assert got[f"{u}/big"]["state"] == "skipped" and "bytes" in got[f"{u}/big"]["note"]
    assert got[f"{u}/logo.png"]["state"] == "skipped"
    # one row per page, and robots.txt read once for the run
    assert len(got) == 14  # the home page, its 12 same-site links, and /new (via /old)
    assert site.hits("/robots.txt") == 1

    jobs = await jobs_by(pool, "crawl")
    # 429 / 503 with Retry-After: deferred until then, no attempt burned
    limited, busy = jobs[f"{u}/limited"], jobs[f"{u}/busy"]
    assert (limited["status"], limited["attempts"]) == ("pending", 0)
    assert 110 < await seconds_until(pool, limited["run_after"]) <= 120
    assert (busy["status"], busy["attempts"]) == ("pending", 0)
    assert 20 < await seconds_until(pool, busy["run_after"]) <= 30
    # 5xx and timeouts: a failed attempt, retried after backoff (2 minutes after the first)
    for path, error in (("/broken", "HTTP 500"), ("/slow", "timed out")):
        job = jobs[f"{u}{path}"]
        assert (job["status"], job["attempts"]) == ("pending", 1), path
        assert error in job["last_error"]
        assert 100 < await seconds_until(pool, job["run_after"]) <= 120
        assert got[f"{u}{path}"]["state"] == "queued"

    contacts = {r["value"]: r for r in await pool.fetch("SELECT * FROM contacts WHERE campaign_id = $1", cid)}
    assert set(contacts) == {"owner@site.test", "press@acme.test", "sam@acme.test",
                             "https://www.youtube.com/@acmetrail", "https://www.tiktok.com/@acmetok"}
    assert contacts["sam@acme.test"]["page_url"] == f"{u}/contacts"
    assert contacts["https://www.tiktok.com/@acmetok"]["page_url"] == f"{u}/new"
    drafts = await pool.fetchval("SELECT count(*) FROM drafts WHERE campaign_id = $1", cid)
    assert drafts == 5

    s = result.summary["counts"]
    assert s["contacts_found"] == 5 and s["drafts_written"] == 5 and s["briefs_written"] == 1
    # one quota unit per fetch tried (answered or not), counted on the runs row: the brief,
    # then every page but the blocked one (/new came with /old's redirect)
    assert s["pages_fetched"] == 9 and result.units == 13
    assert await pool.fetchval("SELECT spent FROM quota_ledger") == 13
    assert result.summary["stages"]["crawl"] == {"done": 9, "failed": 0, "retried": 2, "deferred": 2}
    brief = await pool.fetchrow("SELECT * FROM briefs WHERE campaign_id = $1", cid)
    assert brief["title"] == "Acme Trail Supply" and brief["language"] == "en"
    assert brief["description"] == "Ultralight trail gear for long walks."
