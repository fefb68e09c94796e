"""One tenant's job cannot touch another's data: every lookup a stage makes because of a
payload is scoped by the job's own campaign. Also: a crawl by URL whose first attempt
failed fetches its page on the retry.

Two tenants, each with a campaign on a site of their own (both real servers on
127.0.0.1): Ann on the shared test site, Bob on a small site served here."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from app.engine import jobs as q
from app.engine.jobs import Job, NewJob
from app.outreach.sql import statement
from app.outreach import STAGES
from app.outreach.extract import extract
from app.pipeline.stage import Context, FailJob, Tally
from tests.outreach.factories import api_key
from tests.outreach.conftest import api_client, campaign, reachable, run, settings
from tests.outreach.servers import Recorder, ServerThread

# every table that holds a campaign's data (and its owner's share of the quota): each row, whole
ANNS_ROWS = {
    "campaigns": "SELECT to_jsonb(t)::text AS row FROM campaigns t WHERE id = $1",
    "pages": "SELECT to_jsonb(t)::text AS row FROM pages t WHERE campaign_id = $1",
    "contacts": "SELECT to_jsonb(t)::text AS row FROM contacts t WHERE campaign_id = $1",
    "drafts": "SELECT to_jsonb(t)::text AS row FROM drafts t WHERE campaign_id = $1",
    "briefs": "SELECT to_jsonb(t)::text AS row FROM briefs t WHERE campaign_id = $1",
    "credit_ledger": "SELECT to_jsonb(t)::text AS row FROM credit_ledger t WHERE campaign_id = $1",
    "campaign_usage": "SELECT to_jsonb(t)::text AS row FROM campaign_usage t WHERE campaign_id = $1",
    "jobs": "SELECT to_jsonb(t)::text AS row FROM jobs t WHERE lane = $1",
    "quota_user_ledger": "SELECT to_jsonb(t)::text AS row FROM quota_user_ledger t "
                         "WHERE user_id = (SELECT user_id FROM campaigns WHERE id = $1)",
}


class BobsSite:
    """Bob's site: a home page, an about page with an address, and /flaky, which fails
    its first `failures` requests (HTTP 500, or too slow to answer) and then works."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self.failures, self.mode = 0, "500"

    def app(self) -> Starlette:
        def page(title: str, body: str) -> HTMLResponse:
            return HTMLResponse(f"<!doctype html><html lang='en'><head><title>{title}</title></head>"
                                f"<body>{body}</body></html>")

        async def robots(request):
            self.rec.hits.append(request.url.path)
            return PlainTextResponse("User-agent: *\nAllow: /\n")

        async def home(request):
            self.rec.hits.append(request.url.path)
            return page("Bob's Bikes", '<a href="/about">about</a>')

        async def about(request):
            self.rec.hits.append(request.url.path)
            return page("About Bob", "write to hello@bob.test")

        async def flaky(request):
            self.rec.hits.append(request.url.path)
            if self.failures > 0:
                self.failures -= 1
                if self.mode == "timeout":
                    await asyncio.sleep(1.5)
                else:
                    return PlainTextResponse("boom", status_code=500)
            return page("Flaky", "finally: flaky@bob.test")

        async def down(request):
            self.rec.hits.append(request.url.path)
            return PlainTextResponse("down", status_code=500)

        return Starlette(routes=[Route("/robots.txt", robots), Route("/", home), Route("/about", about),
                                 Route("/flaky", flaky), Route("/down", down)])


@pytest.fixture(scope="module")
def _bobs_server():
    bobs = BobsSite()
    with reachable(ServerThread(bobs.app())) as server:
        bobs.url = server.url
        yield bobs


@pytest.fixture
def bobs_site(_bobs_server):
    _bobs_server.rec.clear()
    _bobs_server.failures, _bobs_server.mode = 0, "500"
    return _bobs_server


async def snapshot(pool, campaign_id) -> dict[str, list]:
    """Every row of the campaign's, whole, in every table that holds its data."""
    out = {}
    for table, sql in ANNS_ROWS.items():
        out[table] = sorted(r["row"] for r in await pool.fetch(sql, campaign_id))
    return out


@pytest.fixture
async def bobs_api(dsn):
    async with api_client(dsn) as client:
        yield client


async def test_bobs_jobs_naming_anns_rows_change_nothing_of_hers(pool, site, bobs_site, bobs_api):
    ann = await campaign(pool, site.url + "/", owner="ann@example.com")
    bobs_key = await api_key(pool, "bob@example.com", plan="pro")
    bob = await campaign(pool, bobs_site.url + "/", owner="bob@example.com")
    await run(pool)

    pages = {r["url"].removeprefix(site.url): r for r in
             await pool.fetch("SELECT * FROM pages WHERE campaign_id = $1", ann)}
    contacts = {r["value"]: r["id"] for r in await pool.fetch("SELECT * FROM contacts WHERE campaign_id = $1", ann)}
    home, contacts_page, queued = pages["/"]["id"], pages["/contacts"]["id"], pages["/limited"]["id"]
    assert pages["/limited"]["state"] == "queued"  # deferred by its Retry-After: still to fetch
    # a contact of Ann's whose draft is not written yet: drafting it costs her a credit
    undrafted, drafted = contacts["sam@acme.test"], contacts["press@acme.test"]
    await pool.execute("DELETE FROM drafts WHERE contact_id = $1", undrafted)
    draft_id = await pool.fetchval("SELECT id FROM drafts WHERE contact_id = $1", drafted)
    # Ann's own retries wait a day, so nothing of hers is due while Bob's jobs run
    await pool.execute("UPDATE jobs SET run_after = now() + interval '1 day' "
                       "WHERE lane = $1 AND status = 'pending'", ann)

    before = await snapshot(pool, ann)
    assert all(before.values())  # she has rows in every one of them
    assert await pool.fetchval("SELECT credits FROM campaign_usage WHERE campaign_id = $1", ann) == 5
    spent_before = await pool.fetchval("SELECT spent FROM quota_ledger")

    u = site.url
    every = {"page_id": str(home), "contact_id": str(undrafted), "draft_id": str(draft_id),
             "campaign_id": str(ann), "url": f"{u}/limited"}
    # (type, payload, how the job must end): payloads that fit their stage, on Bob's
    # campaign. The API takes the one in `taken`; the rest name Ann's page, contact or
    # site, and it refuses them (422 job_refused, as for an id that does not exist)
    plain = [
        ("crawl", {"page_id": str(queued)}, f"page {queued} is not in this job's campaign"),
        ("crawl", {"page_id": str(home), "url": f"{u}/"}, f"page {home} is not in this job's campaign"),
        ("crawl", {"url": f"{u}/limited"},
         f"{u}/limited is not on this job's campaign's site ({bobs_site.url}/); nothing was fetched"),
        ("extract", {"page_id": str(contacts_page)}, f"page {contacts_page} is not in this job's campaign"),
        ("draft", {"contact_id": str(undrafted)}, f"contact {undrafted} is not in this job's campaign"),
        ("draft", {"contact_id": str(drafted)}, f"contact {drafted} is not in this job's campaign"),
        ("brief", {}, None),  # runs, on Bob's campaign
        ("digest", {"period": "2027-03-01T00:00:00+00:00"}, "the digest reads every campaign"),
    ]
    taken = [("brief", {})]
    # (type, payload, campaign, how the job must end): payloads naming Ann's campaign or
    # anything else, and jobs with no campaign. The API may refuse these; the queue has
    # other producers, so the stages must hold whatever gets in.
    odd = [
        ("crawl", {"url": f"{u}/limited", "campaign_id": str(ann)}, bob, "is not on this job's campaign's site"),
        ("extract", {"page_id": str(queued), "campaign_id": str(ann)}, bob,
         f"page {queued} is not in this job's campaign"),
        ("draft", {"contact_id": str(drafted), "draft_id": str(draft_id), "campaign_id": str(ann)}, bob,
         f"contact {drafted} is not in this job's campaign"),
        ("draft", {"contact_id": "nope"}, bob, "draft jobs need a contact_id (a UUID) in their payload, not 'nope'"),
        ("brief", every, bob, None),  # the payload cannot point the brief at another campaign
        ("crawl", every, None, "crawl jobs need a campaign (its lane); this one has none"),
        ("crawl", {"url": f"{u}/limited"}, None, "crawl jobs need a campaign"),
        ("extract", every, None, "extract jobs need a campaign"),
        ("draft", every, None, "draft jobs need a campaign"),
        ("brief", every, None, "brief jobs need a campaign"),
        ("digest", {"period": "2027-03-01T00:00:00+00:00", "campaign_id": str(ann)}, bob,
         "the digest reads every campaign"),
        ("digest", every, None, "digest jobs need a period"),  # the ownerless lane is the digest's own
    ]
    attacks = [(t, p, bob, e) for t, p, e in plain] + odd
    assert {t for t, *_ in plain} == {t for t, *_ in odd} == {s.type for s in STAGES}  # every job type
    bob_auth = {"Authorization": f"Bearer {bobs_key}"}
    # Bob cannot put a job in Ann's campaign at all (the API's check) ...
    r = await bobs_api.post("/jobs", headers=bob_auth, json={"type": "crawl", "lane": str(ann),
                                                              "payload": {"page_id": str(queued)}})
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_lane"
    # ... so he puts them in his own, naming her rows
    ids = []
    for type_, payload, campaign_id, _ in attacks:
        body = {"type": type_, "payload": payload, **({"lane": str(campaign_id)} if campaign_id else {})}
        r = await bobs_api.post("/jobs", headers=bob_auth, json=body)
        plain_one = campaign_id == bob and (type_, payload) in [(t, p) for t, p, _ in plain]
        if plain_one and (type_, payload) in taken:
            assert r.status_code == 201, r.text
            ids.append(uuid.UUID(r.json()["job"]["id"]))
        else:
            assert r.status_code in (403, 422), r.text
            assert not plain_one or r.json()["error"]["code"] == "job_refused", r.text
            ids.append(await q.enqueue(pool, NewJob(type=type_, payload=payload, lane=campaign_id)))
    site.rec.clear()
    bobs_site.rec.clear()
    result = await run(pool)
    assert result.error is None

    assert await snapshot(pool, ann) == before
    assert site.rec.hits == []  # nothing was fetched from Ann's site
    assert await pool.fetchval("SELECT count(*) FROM credit_ledger WHERE job_id = ANY ($1::uuid[])", ids) == 0
    # the shared quota moved by Bob's fetches only: his two briefs' home page
    assert result.units == 2 and await pool.fetchval("SELECT spent FROM quota_ledger") == spent_before + 2
    assert bobs_site.rec.count("/") == 2
    for job_id, (type_, payload, campaign_id, error) in zip(ids, attacks):
        job = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
        if error is None:
            assert job["status"] == "done", (type_, payload, job["last_error"])
        else:
            # failed for good on its first attempt: no retry can make it Ann's
            assert (job["status"], job["attempts"]) == ("failed", 1), (type_, payload)
            assert error in job["last_error"], (type_, payload, job["last_error"])
    assert result.summary["stages"]["crawl"]["failed"] == 6 and result.jobs_failed == 18
    # Bob's brief ran on Bob's campaign, from Bob's site
    assert await pool.fetchval("SELECT title FROM briefs WHERE campaign_id = $1", bob) == "Bob's Bikes"


async def test_an_extract_batch_mixing_campaigns_reads_each_page_in_its_own_jobs_campaign(pool):
    ann = await campaign(pool, "https://ann.example/", owner="ann@example.com")
    bob = await campaign(pool, "https://bob.example/", owner="bob@example.com")
    page = await pool.fetchval(
        "INSERT INTO pages (campaign_id, url, state, status_code, content_type, body) "
        "VALUES ($1, 'https://ann.example/', 'fetched', 200, 'text/plain', 'mail ann@ann.example') RETURNING id", ann)
    payload = {"page_id": str(page)}
    bobs = Job(id=uuid.uuid4(), type="extract", payload=payload, attempts=1, lane=bob, run_id=None)
    anns = Job(id=uuid.uuid4(), type="extract", payload=payload, attempts=1, lane=ann, run_id=None)
    tally = Tally()
    ctx = Context(db=pool, run_id=uuid.uuid4(), trigger="t", settings=settings(),
                  deadline=time.monotonic() + 60, tally=tally)
    problems = await extract([bobs, anns], ctx)  # Bob's first: it must not shadow Ann's
    assert list(problems) == [bobs.id] and isinstance(problems[bobs.id], FailJob)
    assert str(problems[bobs.id]) == f"page {page} is not in this job's campaign"
    assert tally.counts == {"contacts_found": 1, "pages_read": 1}
    found = await pool.fetch("SELECT campaign_id, value FROM contacts")
    assert [(r["campaign_id"], r["value"]) for r in found] == [(ann, "ann@ann.example")]
    draft_jobs = await pool.fetch("SELECT lane FROM jobs WHERE type = 'draft'")
    assert [r["lane"] for r in draft_jobs] == [ann]


async def _crawl_by_url(pool, campaign_id, url: str) -> uuid.UUID:
    return await q.enqueue(pool, NewJob(type="crawl", lane=campaign_id, payload={"url": url}))


async def _page(pool, campaign_id, url: str):
    return await pool.fetchrow("SELECT * FROM pages WHERE campaign_id = $1 AND url = $2", campaign_id, url)


@pytest.mark.parametrize("first_attempt", ["500", "timeout"])
async def test_a_crawl_by_url_whose_first_attempt_failed_fetches_the_page_on_its_retry(pool, bobs_site,
                                                                                      first_attempt):
    bob = await campaign(pool, bobs_site.url + "/", owner="bob@example.com")
    await run(pool)  # the brief and its crawl: /flaky is not linked from anywhere
    url = f"{bobs_site.url}/flaky"
    bobs_site.failures, bobs_site.mode = 1, first_attempt
    job = await _crawl_by_url(pool, bob, url)
    await run(pool)
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert ("HTTP 500" if first_attempt == "500" else "timed out") in row["last_error"]
    assert (await _page(pool, bob, url))["state"] == "queued"  # its first attempt recorded the page

    await pool.execute("UPDATE jobs SET run_after = now() WHERE id = $1", job)  # the backoff is over
    await run(pool)
    assert (await pool.fetchrow("SELECT status FROM jobs WHERE id = $1", job))["status"] == "done"
    page = await _page(pool, bob, url)
    assert (page["state"], page["status_code"]) == ("fetched", 200) and "flaky@bob.test" in page["body"]
    assert bobs_site.rec.count("/flaky") == 2
    assert await pool.fetchval("SELECT count(*) FROM contacts WHERE value = 'flaky@bob.test'") == 1


async def test_a_crawl_by_url_fetches_a_page_a_killed_attempt_left_queued(pool, bobs_site):
    bob = await campaign(pool, bobs_site.url + "/", owner="bob@example.com")
    await run(pool)
    url = f"{bobs_site.url}/flaky"
    # the first attempt recorded the page and its process died before fetching it
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(*statement("pages_discover").bind(campaign_id=bob, urls=[url], depth=0))
    job = await _crawl_by_url(pool, bob, url)
    await pool.execute("UPDATE jobs SET attempts = 1 WHERE id = $1", job)  # swept and back to pending
    await run(pool)
    assert (await _page(pool, bob, url))["state"] == "fetched" and bobs_site.rec.count("/flaky") == 1


async def test_a_crawl_by_url_that_gives_up_marks_its_page_failed(pool, bobs_site):
    bob = await campaign(pool, bobs_site.url + "/", owner="bob@example.com")
    await run(pool)
    url = f"{bobs_site.url}/down"
    job = await _crawl_by_url(pool, bob, url)
    for _ in range(3):
        await run(pool)
        await pool.execute("UPDATE jobs SET run_after = now() WHERE id = $1", job)
    assert (await pool.fetchrow("SELECT status FROM jobs WHERE id = $1", job))["status"] == "failed"
    page = await _page(pool, bob, url)
    assert page["state"] == "failed" and "HTTP 500" in page["note"]  # not left queued forever
    assert bobs_site.rec.count("/down") == 3
