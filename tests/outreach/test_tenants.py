"""Tenants on the example's routes: one account's key never reaches another's campaigns,
contacts or plan, on any route the example adds (tests/api/test_tenants.py: the queue's).

The route list comes from the OpenAPI document, so a new route of the example is covered
(or this test says which rule it needs) without anyone remembering to add it."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from app.api import create_app
from app.engine import accounts
from app.engine.batches import BatchRequest, create_batch
from app.engine.tenancy import tenant_transaction
from tests.api.serving_kit import Recorder
from tests.outreach import factories as f
from tests.outreach.conftest import settings

EXAMPLE_PREFIXES = ("/campaigns", "/plans")


@dataclass
class Tenant(f.Tenant):
    pending_job: uuid.UUID
    batch: uuid.UUID
    contact: uuid.UUID

    @property
    def campaign(self) -> uuid.UUID:
        return self.lane  # a campaign's id is its lane's

    def secrets(self) -> list[str]:
        """Strings that must never appear in another tenant's answers."""
        return [self.email, str(self.campaign), str(self.pending_job), str(self.batch), str(self.contact)]


async def make_tenant(pool, email: str) -> Tenant:
    key = await f.api_key(pool, email, plan="standard")
    user_id = await f.user(pool, "standard", email)
    campaign = await f.campaign(pool, user_id, name=email)
    [pending] = await f.jobs(pool, "record", 1, lane=campaign)
    batch = (await create_batch(pool, campaign, [BatchRequest("export")])).batch_id
    page = await pool.fetchval("INSERT INTO pages (campaign_id, url) VALUES ($1, $2) RETURNING id",
                               campaign, f"https://{email.split('@')[1]}/")
    contact = await pool.fetchval(
        "INSERT INTO contacts (campaign_id, kind, value, page_id, page_url) "
        "VALUES ($1, 'email', $2, $3, 'https://x/') RETURNING id", campaign, f"hello@{email.split('@')[1]}", page)
    return Tenant(email, key, user_id, campaign, pending, batch, contact)


@pytest.fixture
async def two_tenants(pool):
    return await make_tenant(pool, "alice@a.example"), await make_tenant(pool, "bob@b.example")


@pytest.fixture
async def client(dsn):
    stages = [Recorder("brief").stage, Recorder("record").stage, Recorder("export").stage]
    app = create_app(settings(database_url=dsn, run_scheduler=False), stages)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test") as c:
        yield c
    await app.state.runtime.close()


async def snapshot(pool, t: Tenant):
    campaign = await pool.fetchrow("SELECT * FROM campaigns WHERE id = $1", t.campaign)
    contacts = await pool.fetch("SELECT * FROM contacts WHERE campaign_id = $1 ORDER BY id", t.campaign)
    plan = await pool.fetchval("SELECT plan FROM subscriptions WHERE user_id = $1", t.user_id)
    jobs = await pool.fetch("SELECT id, status FROM jobs WHERE lane = $1 ORDER BY id", t.campaign)
    return dict(campaign), [dict(r) for r in contacts], plan, [tuple(r) for r in jobs]


def fill(template: str, other: Tenant) -> str:
    ids = {"campaign_id": other.campaign}

    def one(match: re.Match) -> str:
        name = match.group(1)
        assert name in ids, f"add a rule for the path parameter {{{name}}} to this test"
        return str(ids[name])
    return re.sub(r"\{([^}]+)\}", one, template)


def bodies(method: str, template: str, other: Tenant) -> list[dict | None]:
    """Request bodies that name the other tenant's things."""
    if template == "/campaigns" and method == "post":
        return [{"url": "https://b.example/", "owner": other.email}]
    if template == "/campaigns/{campaign_id}/batches" and method == "post":
        return [{"jobs": [{"type": "record"}]}]
    if method == "patch":
        return [{"status": "paused"}]
    return [None]


async def test_every_example_route_with_a_key_and_another_tenants_ids_finds_nothing(client, pool, two_tenants):
    a, b = two_tenants
    before = await snapshot(pool, b)
    document = (await client.get("/openapi.json")).json()
    tried = 0
    for template, item in document["paths"].items():
        if not template.startswith(EXAMPLE_PREFIXES):
            continue
        for method, op in item.items():
            path = fill(template, b)
            for body in bodies(method, template, b):
                r = await client.request(method.upper(), path, json=body, headers=a.headers)
                tried += 1
                where = f"{method.upper()} {path} {body}"
                assert r.status_code < 500, (where, r.text)
                for secret in b.secrets():
                    if secret not in where:  # an error may repeat what was asked, nothing more
                        assert secret not in r.text, (where, r.text)
                if r.status_code < 300 and "{campaign_id}" in template:
                    pytest.fail(f"{where} succeeded with another tenant's ids: {r.text[:300]}")
                elif r.status_code >= 300:
                    assert r.status_code in (403, 404, 409, 422), (where, r.status_code, r.text)
    assert tried >= 4
    assert await snapshot(pool, b) == before


async def test_an_unfiltered_query_in_a_tenant_transaction_returns_only_its_campaigns(pool, two_tenants):
    a, b = two_tenants
    actor = await accounts.authenticate(pool, a.key)
    async with tenant_transaction(pool, actor) as conn:
        # deliberately no WHERE: row-level security is the filter
        assert [r["id"] for r in await conn.fetch("SELECT id FROM campaigns")] == [a.campaign]
        assert [r["id"] for r in await conn.fetch("SELECT id FROM contacts")] == [a.contact]
        # and a write aimed at another tenant's row changes nothing
        assert await conn.execute("UPDATE campaigns SET status = 'paused' WHERE id = $1", b.campaign) == "UPDATE 0"


async def test_a_tenants_campaign_is_audited_as_theirs(client, pool, two_tenants):
    a, _ = two_tenants
    await pool.execute("TRUNCATE audit_log")
    made = await client.post("/campaigns", json={"url": "https://a2.example/"}, headers=a.headers)
    assert made.status_code == 201, made.text
    rows = await pool.fetch("SELECT * FROM audit_log ORDER BY id")
    assert ("campaigns", "INSERT", made.json()["id"]) in {(r["table_name"], r["op"], r["row_id"]) for r in rows}
    assert {(r["actor_kind"], r["actor_id"]) for r in rows} == {("user", str(a.user_id))}


async def test_plans_are_audited_from_the_cli(pool, dsn):
    env = {"DATABASE_URL": dsn, "PATH": "/usr/bin:/bin"}  # the default deployment: the example's commands
    for args in (["user", "add", "carol@c.example"], ["plan", "set", "carol@c.example", "pro"]):
        done = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
    rows = await pool.fetch("SELECT * FROM audit_log WHERE actor_kind = 'system' ORDER BY id")
    assert {r["actor_id"] for r in rows} == {"cli"}
    assert {r["table_name"] for r in rows} == {"users", "subscriptions"}


async def test_a_campaign_written_with_no_actor_is_refused(pool):
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="without an actor"):
        await pool.execute("INSERT INTO campaigns (name) VALUES ('ghost')")
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0
