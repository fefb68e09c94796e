"""The stages ahead of crawl deduplicate what people enqueue: one open extract per page,
draft per contact, brief per campaign, whatever dedupe key the caller sends. Earlier
stages are claimed first, so a tenant's thousand copies of one extract held every
tenant's crawls back while they drained (the loop's turn rule is the other half:
tests/test_pipeline.py)."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from tests import factories as f
from tests.cli.test_cli_operator import skiplock


async def test_a_tenants_flood_of_one_extract_is_one_job(api, pool):
    key = {"Authorization": f"Bearer {await f.api_key(pool, 'mallory@example.com', plan='free')}"}
    lane = (await api.post("/campaigns", json={"url": "https://mallory.example"}, headers=key)).json()["id"]
    page = str(uuid.uuid4())

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
    contact = str(uuid.uuid4())
    drafts = [await api.post("/jobs", headers=key, json={"type": "draft", "lane": lane,
                                                         "payload": {"contact_id": contact}}) for _ in range(3)]
    assert [d.status_code for d in drafts] == [201, 200, 200]
    brief = await api.post("/jobs", headers=key, json={"type": "brief", "lane": lane, "payload": {}})
    assert brief.status_code == 200 and brief.json()["job"]["dedupeKey"] == f"brief:{lane}"
    # a crawl is the last stage (a flood of it only competes with its own lane): as before
    crawls = [await api.post("/jobs", headers=key, json={"type": "crawl", "lane": lane,
                                                         "payload": {"url": "https://mallory.example/a"}})
              for _ in range(2)]
    assert [c.status_code for c in crawls] == [201, 201]


async def test_the_cli_enqueues_with_the_stages_key(dsn, pool, api):
    key = {"Authorization": f"Bearer {await f.api_key(pool, 'ops@example.com', plan='pro')}"}
    lane = (await api.post("/campaigns", json={"url": "https://ops.example"}, headers=key)).json()["id"]
    env = {"PIPELINE_PLUGINS": "app.outreach.plugin:PLUGIN", "PIPELINE_STAGES": ""}
    page = str(uuid.uuid4())
    args = ("enqueue", "extract", "--lane", lane, "--payload", f'{{"page_id": "{page}"}}')
    first, again = [await asyncio.to_thread(skiplock, *args, dsn=dsn, env=env) for _ in range(2)]
    assert first.returncode == 0 and '"deduplicated": false' in first.stdout, first.stderr
    assert again.returncode == 0 and '"deduplicated": true' in again.stdout, again.stderr
    refused = await asyncio.to_thread(skiplock, *args, "--dedupe-key", "x", dsn=dsn, env=env)
    assert refused.returncode == 2 and refused.stderr.startswith("error: jobs of type 'extract' are deduplicated")
