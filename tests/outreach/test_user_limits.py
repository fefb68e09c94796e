"""Per-owner limits from the plans: how many campaigns one owner may have (checked when
one is added, one creation at a time per owner), and how much of the shared daily quota
one owner's campaigns may spend (the rest stays for everyone else)."""

from __future__ import annotations

import asyncio

import pytest

from app.outreach.sql import statement
from app.outreach import quota
from app.outreach.campaigns import CampaignLimitError, add_campaign
from app.outreach.crawl import discover, lock_pages
from app.outreach.plans import PLANS
from tests.outreach import factories as f
from tests.outreach.conftest import api_client, campaign, run
from tests.test_migrate_cli import cli, one_line_error

FREE = PLANS["free"]


@pytest.fixture
async def api(dsn):
    async with api_client(dsn, db_pool_size=12) as client:
        yield client


async def free_user_with_campaigns(pool, email: str, n: int) -> dict[str, str]:
    key = await f.api_key(pool, email, plan="free")
    for i in range(n):
        await add_campaign(pool, f"https://site{i}.example", owner=email)
    return {"Authorization": f"Bearer {key}"}


async def test_a_free_user_at_the_campaign_limit_gets_a_409(api, pool):
    headers = await free_user_with_campaigns(pool, "fay@example.com", FREE.max_campaigns)
    r = await api.post("/campaigns", json={"url": "https://one-more.example"}, headers=headers)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "campaign_limit"
    assert error["details"] == {"plan": "free", "maxCampaigns": FREE.max_campaigns, "campaigns": FREE.max_campaigns}
    assert f"as many as the Free plan allows ({FREE.max_campaigns})" in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == FREE.max_campaigns


async def test_the_cli_says_so_in_one_line(dsn, pool):
    await free_user_with_campaigns(pool, "cli@example.com", FREE.max_campaigns)
    one_line_error(cli("campaign", "add", "https://one-more.example", "--owner", "cli@example.com",
                       env={"PIPELINE_STAGES": "app.outreach:STAGES"}, dsn=dsn),
                   f"has {FREE.max_campaigns} campaigns, as many as the Free plan allows")


async def test_concurrent_creations_at_one_below_the_limit_let_exactly_one_through(api, pool):
    headers = await free_user_with_campaigns(pool, "rush@example.com", FREE.max_campaigns - 1)
    answers = await asyncio.gather(*(api.post("/campaigns", json={"url": f"https://rush{i}.example"},
                                              headers=headers) for i in range(8)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] + [409] * 7, [r.text for r in answers]
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == FREE.max_campaigns


async def test_creations_for_one_owner_queue_on_the_owners_row(pool):
    """Deterministic: the owner's row is held while eight creations start; each must wait
    for it before counting, so once it is let go exactly one fits under the limit."""
    await free_user_with_campaigns(pool, "cli2@example.com", FREE.max_campaigns - 1)
    owner = await pool.fetchval("SELECT id FROM users WHERE email = 'cli2@example.com'")

    async def one(i):
        try:
            return await add_campaign(pool, f"https://c{i}.example", owner="cli2@example.com")
        except CampaignLimitError:
            return None

    async def waiting_on_locks() -> int:
        return await pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                   "AND datname = current_database()")

    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(*statement("usage_owner_lock").bind(owner_id=owner))
        tasks = [asyncio.create_task(one(i)) for i in range(8)]
        while not all(t.done() for t in tasks) and await waiting_on_locks() < len(tasks):
            await asyncio.sleep(0.02)
    made = await asyncio.gather(*tasks)
    assert sum(m is not None for m in made) == 1
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == FREE.max_campaigns


async def crawl_of(pool, site, owner: str, n: int):
    """A free owner's campaign with n plain pages queued (and no brief)."""
    cid = await campaign(pool, site.url + "/", plan="free", owner=owner)
    await pool.execute("DELETE FROM jobs WHERE lane = $1", cid)
    async with pool.acquire() as conn, conn.transaction():
        await lock_pages(conn, cid)
        await discover(conn, cid, [f"{site.url}/fair/{owner[:3]}/{i}" for i in range(n)], 1)
    return cid


async def test_an_owner_whose_quota_share_is_spent_waits_while_another_keeps_going(pool, site):
    limits = dict(quota_daily_units=30, quota_reserve_units=0, fetch_timeout_seconds=5)
    share = FREE.quota_share(30)
    assert share == 3
    greedy = await crawl_of(pool, site, "greedy@example.com", 8)
    modest = await crawl_of(pool, site, "modest@example.com", 3)

    result = await run(pool, "manual", **limits)
    assert result.stop_reason == "no_work" and result.jobs_failed == 0
    crawls = await pool.fetch("SELECT lane, status, attempts, run_after, last_error FROM jobs "
                              "WHERE type = 'crawl'")
    greedy_jobs = [j for j in crawls if j["lane"] == greedy]
    assert sum(j["status"] == "done" for j in greedy_jobs) == share
    waiting = [j for j in greedy_jobs if j["status"] == "pending"]
    assert len(waiting) == 8 - share
    assert {(j["run_after"], j["attempts"]) for j in waiting} == {(quota.next_utc_day(), 0)}
    # the other owner was not held up: all their pages were fetched
    assert {j["status"] for j in crawls if j["lane"] == modest} == {"done"}
    assert await pool.fetchval("SELECT spent FROM quota_ledger") == share + 3  # plenty left for others
    greedy_owner = await pool.fetchval("SELECT user_id FROM campaigns WHERE id = $1", greedy)
    assert await quota.share_spent_today(pool, greedy_owner) == share
    # a refused fetch does not use up the campaign's page allowance
    assert await pool.fetchval("SELECT pages FROM campaign_usage WHERE campaign_id = $1", greedy) == share


async def test_concurrent_share_spends_never_pass_the_share(pool):
    owner = await f.user(pool, "free")
    cid = await f.campaign(pool, owner)
    taken = await asyncio.gather(*(quota.spend_share(pool, cid, 1, share=5) for _ in range(20)))
    assert sum(taken) == 5
    assert await quota.share_spent_today(pool, owner) == 5


async def test_a_campaign_without_an_owner_has_no_share_to_run_out_of(pool):
    cid = await f.campaign(pool, None)
    assert all([await quota.spend_share(pool, cid, 1, share=1) for _ in range(3)])
    assert await pool.fetchval("SELECT count(*) FROM quota_user_ledger") == 0


def test_every_plan_has_a_campaign_limit_and_a_share_below_the_whole_quota():
    for plan in PLANS.values():
        assert plan.max_campaigns >= 1
        assert 0 < plan.quota_share_percent < 100
        assert 1 <= plan.quota_share(10_000) < 10_000
    assert PLANS["free"].quota_share(1) == 1  # rounded up: any quota leaves everyone a unit
