"""The stages ahead of crawl deduplicate what people enqueue: one open extract per page,
draft per contact, brief per campaign, whatever dedupe key the caller sends. Earlier
stages are claimed first, so a tenant's thousand copies of one extract held every
tenant's crawls back while they drained (the loop's turn rule is the other half:
tests/test_pipeline.py). And a page or contact id that is not the lane's campaign's is
refused where people enqueue: thousands of distinct random ids did the same (each a job
claimed only to fail), slowing another tenant's crawls to a sixth of their pace."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from tests.outreach import factories as f
from tests.cli.test_cli_operator import skiplock


async def _page(pool, lane, url: str) -> str:
    return str(await pool.fetchval("INSERT INTO pages (campaign_id, url) VALUES ($1::uuid, $2) RETURNING id",
                                   lane, url))


async def _contact(pool, lane, value: str) -> str:
    return str(await pool.fetchval("INSERT INTO contacts (campaign_id, kind, value, page_url) "
                                   "VALUES ($1::uuid, 'email', $2, 'https://x.example/') RETURNING id", lane, value))


async def _tenant(api, pool, email: str, url: str) -> tuple[dict, str]:
    key = {"Authorization": f"Bearer {await f.api_key(pool, email, plan='free')}"}
    return key, (await api.post("/campaigns", json={"url": url}, headers=key)).json()["id"]


async def test_a_tenants_flood_of_one_extract_is_one_job(api, pool):
    key, lane = await _tenant(api, pool, "mallory@example.com", "https://mallory.example")
    page = await _page(pool, lane, "https://mallory.example/")

    async def send(i: int) -> httpx.Response:
        return await api.post("/jobs", headers=key, json={"type": "extract", "lane": lane,
                                                           "payload": {"page_id": page}})
    answers = await asyncio.gather(*(send(i) for i in range(60)))
    assert sorted(a.status_code for a in answers) == [200] * 59 + [201], [a.text for a in answers[:2]]
    assert len({a.json()["job"]["id"] for a in answers}) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'extract'") == 1

    # a key of the caller's own would make every copy new: refused, naming the stage's key
    mine = await api.post("/jobs", headers=key, json={"type": "extract", "lane": lane, "dedupe_key": "copy-7",
                                                      "payload": {"page_id": page}})
    assert mine.status_code == 422 and mine.json()["error"]["code"] == "dedupe_key_fixed", mine.text
    assert mine.json()["error"]["details"] == {"dedupeKey": f"extract:{page}"}
    same = await api.post("/jobs", headers=key, json={"type": "extract", "lane": lane,
                                                      "dedupe_key": f"extract:{page}", "payload": {"page_id": page}})
    assert same.status_code == 200 and same.json()["created"] is False

    # drafts per contact, briefs per campaign (the campaign's own brief is already open)
    contact = await _contact(pool, lane, "a@mallory.example")
    drafts = [await api.post("/jobs", headers=key, json={"type": "draft", "lane": lane,
                                                         "payload": {"contact_id": contact}}) for _ in range(3)]
    assert [d.status_code for d in drafts] == [201, 200, 200]
    brief = await api.post("/jobs", headers=key, json={"type": "brief", "lane": lane, "payload": {}})
    assert brief.status_code == 200 and brief.json()["job"]["dedupeKey"] == f"brief:{lane}"
    # a crawl comes after every stage that feeds it (a flood of it only competes with its own
    # lane): without a dedupe key each one is a job
    crawls = [await api.post("/jobs", headers=key, json={"type": "crawl", "lane": lane,
                                                         "payload": {"url": "https://mallory.example/a"}})
              for _ in range(2)]
    assert [c.status_code for c in crawls] == [201, 201]


async def test_a_tenant_enqueues_only_its_own_campaigns_pages_and_contacts(api, pool):
    ann, anns = await _tenant(api, pool, "ann@example.com", "https://ann.example")
    mallory, lane = await _tenant(api, pool, "mallory@example.com", "https://mallory.example")
    own = {"page_id": await _page(pool, lane, "https://mallory.example/"),
           "contact_id": await _contact(pool, lane, "a@mallory.example")}
    hers = {"page_id": await _page(pool, anns, "https://ann.example/"),
            "contact_id": await _contact(pool, anns, "a@ann.example")}
    jobs_before = await pool.fetchval("SELECT count(*) FROM jobs")

    def answer(r: httpx.Response, named: str) -> tuple:
        """What the sender learns, with the id it named taken out."""
        error = r.json()["error"]
        return r.status_code, error["code"], error["message"].replace(named, "ID"), sorted(error["details"])

    for type_, field in (("extract", "page_id"), ("crawl", "page_id"), ("draft", "contact_id")):
        made_up = str(uuid.uuid4())
        nowhere, theirs = [await api.post("/jobs", headers=mallory, json={
            "type": type_, "lane": lane, "payload": {field: named}}) for named in (made_up, hers[field])]
        # no such row and another tenant's are one answer: the id's existence is not told
        assert answer(nowhere, made_up) == answer(theirs, hers[field]) == (
            422, "job_refused", f"{field.removesuffix('_id')} ID is not in campaign {lane}",
            sorted(["location", field])), (type_, theirs.text)
        assert theirs.json()["error"]["details"] == {"location": "body.payload", field: hers[field]}
        mine = await api.post("/jobs", headers=mallory, json={"type": type_, "lane": lane,
                                                              "payload": {field: own[field]}})
        assert mine.status_code == 201, (type_, mine.text)
    # a batch is asked the same; a campaign not yours is a 404 first, whatever its jobs name
    batch = await api.post(f"/campaigns/{lane}/batches", headers=mallory,
                           json={"jobs": [{"type": "crawl", "payload": {"url": "https://mallory.example/b"}},
                                          {"type": "extract", "payload": {"page_id": hers["page_id"]}}]})
    assert answer(batch, hers["page_id"]) == (422, "job_refused", f"page ID is not in campaign {lane}",
                                              ["location", "page_id"]), batch.text
    assert batch.json()["error"]["details"]["location"] == "body.jobs.1.payload"
    elsewhere = await api.post(f"/campaigns/{anns}/batches", headers=mallory,
                               json={"jobs": [{"type": "extract", "payload": {"page_id": hers["page_id"]}}]})
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "not_found", elsewhere.text
    assert await pool.fetchval("SELECT count(*) FROM jobs") == jobs_before + 3
    # the owner names her own page in her campaign; so may an admin, but in no campaign it is refused
    assert (await api.post("/jobs", headers=ann, json={"type": "extract", "lane": anns,
                                                       "payload": {"page_id": hers["page_id"]}})).status_code == 201
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'ops@example.com', admin=True)}"}
    assert (await api.post("/jobs", headers=admin, json={"type": "crawl", "lane": anns,
                                                         "payload": {"page_id": hers["page_id"]}})).status_code == 201
    laneless = await api.post("/jobs", headers=admin, json={"type": "draft", "payload": {"contact_id": own["contact_id"]}})
    assert laneless.status_code == 422 and "has no campaign" in laneless.json()["error"]["message"], laneless.text


async def test_a_crawl_by_url_is_refused_off_its_campaigns_site(api, pool):
    mallory, lane = await _tenant(api, pool, "mallory@example.com", "https://mallory.example")
    _, anns = await _tenant(api, pool, "ann@example.com", "https://ann.example")
    before = await pool.fetchval("SELECT count(*) FROM jobs")

    async def crawl(url: str, **lane_of) -> httpx.Response:
        return await api.post("/jobs", headers=mallory, json={"type": "crawl", "payload": {"url": url}, **lane_of})
    # another tenant's site, an internal-looking name, a look-alike host: refused before the queue
    for url in ("https://ann.example/", "https://mallory.example.attacker.example/", "https://example.org/"):
        r = await crawl(url, lane=lane)
        assert r.status_code == 422 and r.json()["error"]["code"] == "job_refused", (url, r.text)
        assert r.json()["error"]["details"] == {"location": "body.payload", "site": "https://mallory.example/"}
    # no campaign at all (a tenant's job names one of its lanes), and another tenant's
    # campaign (not yours): the lane check first, both
    nowhere = await crawl("https://mallory.example/a")
    assert nowhere.status_code == 422 and nowhere.json()["error"]["code"] == "unknown_lane", nowhere.text
    theirs = await crawl("https://ann.example/", lane=anns)
    assert theirs.status_code == 422 and theirs.json()["error"]["code"] == "unknown_lane", theirs.text
    assert await pool.fetchval("SELECT count(*) FROM jobs") == before
    # its own site, any page of it
    assert (await crawl("https://mallory.example/deep/page?x=1", lane=lane)).status_code == 201


async def test_the_cli_enqueues_with_the_stages_key(dsn, pool, api):
    key = {"Authorization": f"Bearer {await f.api_key(pool, 'ops@example.com', plan='pro')}"}
    lane = (await api.post("/campaigns", json={"url": "https://ops.example"}, headers=key)).json()["id"]
    _, anns = await _tenant(api, pool, "ann@example.com", "https://ann.example")
    env = {"PIPELINE_PLUGINS": "app.outreach.plugin:PLUGIN", "PIPELINE_STAGES": ""}
    page = await _page(pool, lane, "https://ops.example/")

    def enqueue(page_id: str) -> tuple[str, ...]:
        return ("enqueue", "extract", "--lane", lane, "--payload", f'{{"page_id": "{page_id}"}}')
    first, again = [await asyncio.to_thread(skiplock, *enqueue(page), dsn=dsn, env=env) for _ in range(2)]
    assert first.returncode == 0 and '"created": true' in first.stdout, first.stderr
    assert again.returncode == 0 and '"created": false' in again.stdout, again.stderr
    refused = await asyncio.to_thread(skiplock, *enqueue(page), "--dedupe-key", "x", dsn=dsn, env=env)
    assert refused.returncode == 2 and refused.stderr.startswith("error: jobs of type 'extract' are deduplicated")
    # a made-up page and another campaign's: one line each, the same but for the id, exit 2
    made_up, hers = str(uuid.uuid4()), await _page(pool, anns, "https://ann.example/")
    for named in (made_up, hers):
        out = await asyncio.to_thread(skiplock, *enqueue(named), dsn=dsn, env=env)
        assert out.returncode == 2 and out.stderr == (f"error: the 'extract' stage refuses this job: page {named} "
                                                      f"is not in campaign {lane}\n"), out.stderr
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'extract'") == 1


async def _failed(pool, lane: str, type_: str, payload) -> str:
    """A failed job in `lane`, queued the way a producer that does not ask the stage does
    (an older version of the API, the pipeline, SQL), as its handler left it."""
    return str(await pool.fetchval(
        "INSERT INTO jobs (type, lane, payload, status, attempts, finished_at, last_error) "
        "VALUES ($1, $2::uuid, $3, 'failed', 1, now(), 'is not in this job''s campaign') RETURNING id",
        type_, lane, payload))


async def test_a_retry_is_asked_what_an_enqueue_is(api, pool):
    """POST /jobs/{id}/retry queues a failed job again but did not ask its stage: the
    flood's jobs, queued before the stages refused them, could be retried again and again,
    each claimed ahead of every tenant's crawls only to fail (and, finished anew, never
    pruned). A job its stage takes is retried as before."""
    mallory, lane = await _tenant(api, pool, "mallory@example.com", "https://mallory.example")
    _, anns = await _tenant(api, pool, "ann@example.com", "https://ann.example")
    hers = await _page(pool, anns, "https://ann.example/")
    doomed = {
        "another campaign's page": await _failed(pool, lane, "extract", {"page_id": hers}),
        "a made-up contact": await _failed(pool, lane, "draft", {"contact_id": str(uuid.uuid4())}),
        "a URL off the site": await _failed(pool, lane, "crawl", {"url": "https://ann.example/"}),
        "no UUID at all": await _failed(pool, lane, "extract", {"page_id": "nope"}),
        "no payload object": await _failed(pool, lane, "draft", ["x"]),
    }
    for why, job in doomed.items():
        r = await api.post(f"/jobs/{job}/retry", headers=mallory)
        assert r.status_code == 422 and r.json()["error"]["code"] == "job_refused", (why, r.text)
        assert r.json()["error"]["details"]["location"] == "job.payload", (why, r.text)
        if why == "another campaign's page":
            assert r.json()["error"]["message"] == f"page {hers} is not in campaign {lane}"
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == len(doomed)

    own = await _failed(pool, lane, "extract", {"page_id": await _page(pool, lane, "https://mallory.example/")})
    r = await api.post(f"/jobs/{own}/retry", headers=mallory)
    assert r.status_code == 200 and r.json()["status"] == "pending", r.text
    again = await api.post(f"/jobs/{own}/retry", headers=mallory)  # not failed: the retry's own answer
    assert again.status_code == 409 and again.json()["error"]["code"] == "job_not_failed", again.text
