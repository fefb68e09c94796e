"""The example's payloads at the API: each stage's declared payload (app/outreach/payloads.py)
refuses what the stage could not use, and a crawl URL naming a non-public address, with a
422 before anything is queued."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator

import httpx

from app.api import create_app
from app.outreach.payloads import BriefPayload, CrawlPayload, DraftPayload
from app.pipeline.stage import Stage
from tests.api.serving_kit import assert_error
from tests.outreach.conftest import settings


@asynccontextmanager
async def declared(dsn, headers, **overrides) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app whose stages declare the example's payloads and do nothing
    (no run fetches the URLs these tests make up)."""
    async def noop(job, ctx) -> None:
        return None

    stages = [Stage(type=t, handler=noop, payload=model, lease=60, timeout=10)
              for t, model in (("crawl", CrawlPayload), ("draft", DraftPayload), ("brief", BriefPayload))]
    app = create_app(settings(database_url=dsn, run_scheduler=False, **overrides), stages=stages, plugins=[])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                 headers=headers) as client:
        yield client
    await app.state.runtime.close()


async def test_a_payload_must_be_what_its_stage_declares(pool, dsn, admin_headers):
    async with declared(dsn, admin_headers) as client:
        contact = str(uuid.uuid4())
        for body, where, needle in (
            ({"type": "draft", "payload": {}}, "body.payload.contact_id", "required"),
            ({"type": "draft", "payload": {"contact_id": "nope"}}, "body.payload.contact_id", "UUID"),
            ({"type": "draft", "payload": {"contact_id": contact, "extra": 1}}, "body.payload.extra", "not permitted"),
            ({"type": "brief", "payload": {"page_id": contact}}, "body.payload.page_id", "not permitted"),
            ({"type": "crawl", "payload": {}}, "body.payload", "give page_id or url"),
            ({"type": "crawl", "payload": {"url": "ftp://example.com/"}}, "body.payload.url", "http(s) URL"),
            ({"type": "crawl", "payload": {"url": "https://example.com/", "depth": 101}}, "body.payload.depth", "100"),
            ({"type": "crawl", "payload": {"url": "https://example.com/", "depth": 2**31}}, "body.payload.depth", "100"),
            # a number is a JSON number: not true (1 to Python), not a string of digits
            ({"type": "crawl", "payload": {"url": "https://example.com/", "depth": True}}, "body.payload.depth", "integer"),
            ({"type": "crawl", "payload": {"url": "https://example.com/", "depth": "2"}}, "body.payload.depth", "integer"),
        ):
            error = assert_error(await client.post("/jobs", json=body), 422, "invalid_request")
            assert error["details"][0]["location"] == where and needle in error["details"][0]["message"], (body, error)
        assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
        # what fits is stored as declared: the fields sent, in their types
        made = await client.post("/jobs", json={"type": "crawl", "payload": {"url": "https://example.com/a", "depth": 2}})
        assert made.status_code == 201, made.text
        assert made.json()["job"]["payload"] == {"url": "https://example.com/a", "depth": 2}
        draft = await client.post("/jobs", json={"type": "draft", "payload": {"contact_id": contact.upper()}})
        assert draft.json()["job"]["payload"] == {"contact_id": contact}


async def test_a_crawl_url_naming_a_non_public_address_is_422(pool, dsn, admin_headers):
    async with declared(dsn, admin_headers, fetch_allow_private="127.0.0.1:8000") as client:
        for url in ("http://127.0.0.1/", "http://127.1:8000/", "http://0177.0.0.1/", "http://169.254.169.254/",
                    "http://192.168.1.1:8080/admin", "http://localhost:8000/", "http://api.localhost/"):
            error = assert_error(await client.post("/jobs", json={"type": "crawl", "payload": {"url": url}}),
                                 422, "invalid_request")
            assert error["details"][0]["location"] == "body.payload.url" and "not public" in error["message"], url
        assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
        # exactly the listed host:port is the exception
        listed = await client.post("/jobs", json={"type": "crawl", "payload": {"url": "http://127.0.0.1:8000/"}})
        assert listed.status_code == 201, listed.text
