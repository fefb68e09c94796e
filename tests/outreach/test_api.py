"""POST /campaigns, GET /campaigns/{id}, GET /campaigns/{id}/contacts."""

from __future__ import annotations

import uuid

import httpx
import pytest

from app.api import create_app
from app.outreach.sample import sample_site_app
from tests.outreach.conftest import reachable, run, settings
from tests.api.serving_kit import assert_error
from tests.outreach.servers import ServerThread


@pytest.fixture
async def api(dsn, admin_headers):
    app = create_app(settings(database_url=dsn, run_scheduler=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                 headers=admin_headers) as c:
        yield c
    await app.state.runtime.close()


async def test_add_a_campaign_then_read_it_and_its_contacts(api, pool, dsn, admin_headers):
    with reachable(ServerThread(sample_site_app())) as server:
        # an app made now, whose FETCH_ALLOW_PRIVATE lists the server: POST /campaigns checks it too
        listed = create_app(settings(database_url=dsn, run_scheduler=False))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=listed), base_url="http://skiplock.test",
                                     headers=admin_headers) as client:
            r = await client.post("/campaigns", json={"url": server.url, "plan": "standard", "owner": "Kim@Example.com"})
        await listed.state.runtime.close()
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["url"] == server.url + "/" and made["plan"] == "standard" and made["owner"] == "kim@example.com"
        assert r.headers["location"] == f"/campaigns/{made['id']}"
        assert made["brief"] is None and made["counts"]["contacts"] == 0 and made["briefJob"]
        assert made["today"] == {"pages": 0, "credits": 0, "dailyPages": 500, "dailyCredits": 100}
        await run(pool)

    got = (await api.get(f"/campaigns/{made['id']}")).json()
    assert got["brief"]["title"].startswith("Northwind") and got["counts"]["contacts"] == 9
    assert got["counts"]["drafts"] == 9 and got["today"]["pages"] == 13 and got["today"]["credits"] == 9

    seen, cursor = [], None
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        page = (await api.get(f"/campaigns/{made['id']}/contacts", params=params)).json()
        seen += page["data"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == 9 and len({c["id"] for c in seen}) == 9  # keyset pages, no repeats
    keys = [(c["createdAt"], c["id"]) for c in seen]
    assert keys == sorted(keys, reverse=True)  # newest first, like every list route
    press = next(c for c in seen if c["value"] == "press@northwind.test")
    assert press["kind"] == "email" and press["pageUrl"].endswith("/press.html")
    assert press["draft"]["model"] == "template" and press["draft"]["body"].startswith("Hi there,")


@pytest.mark.parametrize("body, status, code, needle", [
    ({"url": "nope"}, 422, "invalid_request", "must be an http(s) URL"),
    ({"url": "ftp://x.example"}, 422, "invalid_request", "must be an http(s) URL"),
    ({"url": "http://x.example:70000/"}, 422, "invalid_request", "must be an http(s) URL"),
    ({"url": "https://x.example/\u0000"}, 422, "invalid_request", "must be an http(s) URL"),
    ({"url": "http://localhost:8000/"}, 422, "invalid_request", "not public"),
    ({"url": "http://LocalHost.:8000/"}, 422, "invalid_request", "not public"),  # as the crawl fetches it
    ({"url": "http://127.0.0.1.:8000/"}, 422, "invalid_request", "not public"),
    ({"url": "https://x.example", "owner": "not-an-email"}, 422, "invalid_request", "must be an e-mail"),
    ({"url": "https://x.example", "plan": "gold"}, 422, "invalid_request", "'free', 'standard' or 'pro'"),
    ({"url": "https://x.example", "colour": "red"}, 422, "invalid_request", "colour"),
    ({}, 422, "invalid_request", "url"),
])
async def test_bad_campaigns_are_refused_and_nothing_is_made(api, pool, body, status, code, needle):
    r = await api.post("/campaigns", json=body)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    assert needle in r.text
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0


async def test_an_owner_on_another_plan_is_a_conflict(api, pool):
    assert (await api.post("/campaigns", json={"url": "https://a.example", "owner": "z@example.com"})).status_code == 201
    r = await api.post("/campaigns", json={"url": "https://b.example", "owner": "z@example.com", "plan": "pro"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "plan_conflict"
    assert "free plan" in r.json()["error"]["message"]


async def test_unknown_campaigns_cursors_and_parameters(api, pool):
    missing = uuid.uuid4()
    for path in (f"/campaigns/{missing}", f"/campaigns/{missing}/contacts"):
        r = await api.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    made = (await api.post("/campaigns", json={"url": "https://a.example"})).json()
    r = await api.get(f"/campaigns/{made['id']}/contacts", params={"cursor": "garbage!"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor"
    r = await api.get(f"/campaigns/{made['id']}/contacts", params={"page": 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"
    r = await api.get(f"/campaigns/{made['id']}/contacts", params={"limit": 0})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_parameter"
    r = await api.get(f"/campaigns/{made['id']}", params={"verbose": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"
    r = await api.get("/campaigns/not-a-uuid")
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    empty = (await api.get(f"/campaigns/{made['id']}/contacts")).json()
    assert empty == {"data": [], "nextCursor": None}


async def test_the_campaign_routes_are_in_the_openapi_document(api):
    doc = (await api.get("/openapi.json")).json()
    assert {"/campaigns", "/campaigns/{campaign_id}", "/campaigns/{campaign_id}/contacts"} <= set(doc["paths"])
    listed = {p["name"] for p in doc["paths"]["/campaigns/{campaign_id}/contacts"]["get"]["parameters"]}
    assert {"limit", "cursor"} <= listed


async def test_a_retried_post_with_an_idempotency_key_adds_one_campaign(api, pool):
    headers = {"Idempotency-Key": "add-shop-1"}
    first = await api.post("/campaigns", json={"url": "https://shop.example"}, headers=headers)
    again = await api.post("/campaigns", json={"url": "https://shop.example"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"] and again.headers.get("idempotent-replayed") == "true"
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 1


async def test_a_campaign_url_with_a_non_public_address_is_422(pool, dsn, admin_headers):
    app = create_app(settings(database_url=dsn, run_scheduler=False, fetch_allow_private="127.0.0.1:8000"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                 headers=admin_headers) as client:
        for url in ("http://127.0.0.1:8080/", "http://2130706433/", "http://0x7f.1/", "http://localhost/",
                    "http://169.254.169.254/latest/meta-data", "http://10.0.0.1", "http://0"):
            r = await client.post("/campaigns", json={"url": url})
            error = assert_error(r, 422, "invalid_request")
            assert error["details"] == [{"location": "body.url", "message": error["details"][0]["message"]}]
            assert "not public" in error["message"], url
        assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0
        # an address FETCH_ALLOW_PRIVATE lists is the exception, and public names are fine
        for url in ("http://127.0.0.1:8000/", "https://example.com"):
            assert (await client.post("/campaigns", json={"url": url})).status_code == 201, url
    await app.state.runtime.close()
