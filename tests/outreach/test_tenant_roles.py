"""Billing is not the API's to write, and a tenant's SQL cannot turn the example's
campaigns into someone else's lane (tests/api/test_tenant_roles.py: the queue's roles).
Each test runs the attack as the API's own role, on the real database, and shows what it
gets: nothing that is not its own."""

from __future__ import annotations

import uuid

import asyncpg
import httpx
import pytest

from app.api import create_app
from app.engine import accounts
from app.engine.tenancy import enter_tenant, tenant_transaction
from app.outreach import DRAFT_STAGE, allowances
from tests.api.serving_kit import Recorder
from tests.api.test_tenant_roles import Tenant as QueueTenant
from tests.outreach import factories as f
from tests.outreach.conftest import settings
from tests.tenant_login import tenant_login_url

BILLING_WRITES = [
    "UPDATE subscriptions SET plan = 'pro'",
    "INSERT INTO subscriptions (user_id, plan) VALUES ($1, 'pro') "
    "ON CONFLICT (user_id) DO UPDATE SET plan = 'pro'",
    "DELETE FROM subscriptions",
    "UPDATE campaign_usage SET pages = 0, credits = 0",
    "INSERT INTO campaign_usage (campaign_id, day) SELECT id, current_date - 1 FROM campaigns WHERE user_id = $1",
    "DELETE FROM campaign_usage",
    "INSERT INTO credit_ledger (campaign_id, job_id, day, kind, credits) "
    "SELECT id, gen_random_uuid(), current_date, 'refund', 5 FROM campaigns WHERE user_id = $1",
    "DELETE FROM credit_ledger",
    "UPDATE quota_ledger SET spent = 0",
    "INSERT INTO quota_ledger (day, units, reserve) VALUES (current_date + 1, 1000000, 0)",
    "UPDATE quota_user_ledger SET spent = 0",
    "DELETE FROM quota_user_ledger",
    "SELECT * FROM billing_subscription_ensure($1, 'pro')",
]


class Tenant(QueueTenant):
    @property
    def campaign(self) -> uuid.UUID:
        return self.lane  # a campaign's id is its lane's


async def make_tenant(pool, email: str, admin: bool = False) -> Tenant:
    key = await f.api_key(pool, email, admin=admin, plan="standard")
    actor = await accounts.authenticate(pool, key)
    campaign = await f.campaign(pool, actor.user_id, name=email)
    [job] = await f.jobs(pool, "draft", 1, lane=campaign)
    assert await allowances.charge_credit(pool, campaign, job, 10) == allowances.CHARGED
    await pool.execute("INSERT INTO quota_user_ledger (user_id, day, spent) VALUES ($1, current_date, 7)",
                       actor.user_id)
    return Tenant(email, key, actor, campaign, job)


@pytest.fixture
async def tenants(pool):
    a = await make_tenant(pool, "alice@a.example")
    b = await make_tenant(pool, "bob@b.example")
    await f.run(pool, "cron")  # a run: the operator's view
    return a, b


async def billing_snapshot(pool):
    return [
        [tuple(r) for r in await pool.fetch("SELECT user_id, plan FROM subscriptions ORDER BY user_id")],
        [tuple(r) for r in await pool.fetch("SELECT campaign_id, day, pages, credits FROM campaign_usage "
                                            "ORDER BY campaign_id")],
        [tuple(r) for r in await pool.fetch("SELECT job_id, kind, seq FROM credit_ledger ORDER BY id")],
        [tuple(r) for r in await pool.fetch("SELECT * FROM quota_ledger ORDER BY day")],
        [tuple(r) for r in await pool.fetch("SELECT * FROM quota_user_ledger ORDER BY user_id")],
    ]


@pytest.mark.parametrize("admin", [False, True], ids=["user key", "admin key"])
async def test_the_api_roles_cannot_write_billing(pool, tenants, admin):
    a, b = tenants
    caller = a if not admin else await make_tenant(pool, "root@ops.example", admin=True)
    before = await billing_snapshot(pool)
    async with tenant_transaction(pool, caller.actor) as conn:
        # reading one's own billing is fine
        assert await conn.fetchval("SELECT plan FROM subscriptions WHERE user_id = $1", caller.user_id) == "standard"
        assert await conn.fetchval("SELECT spent FROM quota_user_ledger WHERE user_id = $1", caller.user_id) == 7
        for sql in BILLING_WRITES:
            if admin and "billing_subscription_ensure" in sql:
                continue  # an admin may create an owner's subscription (POST /campaigns)
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
                async with conn.transaction():
                    await conn.execute(sql, *([caller.user_id] if "$1" in sql else []))
    assert await billing_snapshot(pool) == before


async def test_an_admin_can_only_create_a_missing_subscription_not_change_one(pool, tenants):
    a, _ = tenants
    admin = await make_tenant(pool, "root@ops.example", admin=True)
    newcomer = await f.user(pool, plan=None, email="new@c.example")
    async with tenant_transaction(pool, admin.actor) as conn:
        made = await conn.fetchrow("SELECT * FROM billing_subscription_ensure($1, 'pro')", newcomer)
        kept = await conn.fetchrow("SELECT * FROM billing_subscription_ensure($1, 'pro')", a.user_id)
    assert (made["plan"], made["created"]) == ("pro", True)
    assert (kept["plan"], kept["created"]) == ("standard", False)
    assert await pool.fetchval("SELECT plan FROM subscriptions WHERE user_id = $1", a.user_id) == "standard"


async def test_the_refund_function_gives_back_only_what_is_owed(pool, tenants):
    a, b = tenants
    running = a.job
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now() WHERE id = $1", running)
    [delivered] = await f.jobs(pool, "draft", 1, lane=a.campaign)
    await allowances.charge_credit(pool, a.campaign, delivered, 10)
    contact = await pool.fetchval(
        "INSERT INTO contacts (campaign_id, kind, value, page_url) VALUES ($1, 'email', 'x@a.example', 'https://a/') "
        "RETURNING id", a.campaign)
    await pool.execute("INSERT INTO drafts (campaign_id, contact_id, job_id, body, model) "
                       "VALUES ($1, $2, $3, 'hi', 'template')", a.campaign, contact, delivered)
    await pool.execute("UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = $1", delivered)
    before = await billing_snapshot(pool)
    async with tenant_transaction(pool, a.actor) as conn:
        # a running attempt is using its credit; a job whose draft was delivered owes nothing
        assert await conn.fetchval("SELECT billing_refund_job($1)", running) == 0
        assert await conn.fetchval("SELECT billing_refund_job($1)", delivered) == 0
        assert await conn.fetchval("SELECT billing_refund_job($1)", uuid.uuid4()) == 0
    assert await billing_snapshot(pool) == before


async def test_cancelling_a_paid_job_through_the_api_still_refunds_it(dsn, pool, tenants):
    a, _ = tenants
    app = create_app(settings(database_url=dsn, run_scheduler=False), [DRAFT_STAGE, Recorder("record").stage])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test") as client:
        r = await client.post(f"/jobs/{a.job}/cancel", headers={"Authorization": f"Bearer {a.key}"})
    await app.state.runtime.close()
    assert r.status_code == 200, r.text
    kinds = [r["kind"] for r in await pool.fetch("SELECT kind FROM credit_ledger WHERE job_id = $1 ORDER BY id",
                                                 a.job)]
    assert kinds == ["charge", "refund"]
    assert await pool.fetchval("SELECT credits FROM campaign_usage WHERE campaign_id = $1", a.campaign) == 0


@pytest.fixture
def api_only_login(dsn):
    """The session's tenant login: a member of skiplock_api and of nothing else (what
    TENANT_DATABASE_URL connects the API's tenant requests as)."""
    login = tenant_login_url(dsn)
    if login is None:
        pytest.skip("the test database's role may not create roles")
    return login


ZERO_LANE = uuid.UUID(int=0)


async def test_a_tenant_cannot_take_a_lane_by_naming_it_as_a_campaigns_id(api_only_login, pool, tenants):
    """A campaign's id is its lane's, and the trigger that makes a campaign's lane gives an
    existing lane of that id to the campaign's owner. A tenant's own SQL (on the tenant
    login) once named the all-zero lane, the operator's work with every tenant's
    notifications, as a new campaign's id: it then read those jobs, and deleting its
    'campaign' deleted them. The API roles may not choose or change a campaign's id."""
    a, b = tenants
    notify = await pool.fetchval(
        "INSERT INTO jobs (type, payload) VALUES ('notify', $1) RETURNING id",
        {"url": "https://hooks.bob.example/secret", "event": "job.failed", "data": {"jobId": str(b.job)}})
    conn = await asyncpg.connect(api_only_login)
    try:
        for sql, args in [("INSERT INTO campaigns (id, user_id, url) VALUES ($1, $2, 'https://x.example/')",
                           (ZERO_LANE, a.user_id)),
                          ("UPDATE campaigns SET id = $1 WHERE id = $2", (ZERO_LANE, a.campaign))]:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await enter_tenant(conn, a.actor)
                    await conn.execute(sql, *args)
        async with conn.transaction():  # a campaign whose id the database draws is still the tenant's to make
            await enter_tenant(conn, a.actor)
            await conn.execute("INSERT INTO campaigns (user_id, url) VALUES ($1, 'https://y.example/')", a.user_id)
            assert await conn.fetchval("SELECT count(*) FROM jobs WHERE lane = $1", ZERO_LANE) == 0
    finally:
        await conn.close()
    assert await pool.fetchval("SELECT owner_id FROM lanes WHERE id = $1", ZERO_LANE) is None
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE id = $1", notify) == 1


async def test_a_draft_in_another_campaign_does_not_cancel_a_jobs_refund(api_only_login, pool, tenants):
    """'No draft delivered' is the job's own campaign's draft: Ann's SQL once wrote a draft
    in her campaign naming Bob's draft job, and Bob's cancelled job was never refunded."""
    a, b = tenants
    conn = await asyncpg.connect(api_only_login)
    try:
        async with conn.transaction():
            await enter_tenant(conn, a.actor)
            contact = await conn.fetchval(
                "INSERT INTO contacts (campaign_id, kind, value, page_url) "
                "VALUES ($1, 'email', 'x@a.example', 'https://a/') RETURNING id", a.campaign)
            await conn.execute("INSERT INTO drafts (campaign_id, contact_id, job_id, body, model) "
                               "VALUES ($1, $2, $3, 'hi', 'template')", a.campaign, contact, b.job)
    finally:
        await conn.close()
    async with tenant_transaction(pool, b.actor) as conn:  # Bob's pending job, charged a credit: owed back
        assert await conn.fetchval("SELECT billing_refund_job($1)", b.job) == 1

