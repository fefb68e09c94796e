"""The shared quota: atomic, never below zero; the reserve is for runs a person started."""

from __future__ import annotations

import asyncio

from app.outreach import quota
from app.outreach.crawl import discover, lock_pages
from app.outreach.metrics import quota_gauges
from app.outreach.settings import outreach_settings
from tests.outreach import factories as f
from tests.outreach.conftest import run, seconds_until


async def test_concurrent_spends_never_overspend(pool):
    async def one(trigger):
        return await quota.spend(pool, 1, trigger, daily_units=30, reserve=10)

    scheduled = await asyncio.gather(*(one("cron") for _ in range(40)))
    assert sum(s.ok for s in scheduled) == 20  # down to the reserve, not into it
    assert {s.status for s in scheduled if not s.ok} == {quota.RESERVE}
    people = await asyncio.gather(*(one("manual") for _ in range(40)))
    assert sum(s.ok for s in people) == 10  # a person's run spends the reserve
    assert {s.status for s in people if not s.ok} == {quota.EXHAUSTED}
    day = await quota.today(pool, daily_units=30, reserve=10)
    assert (day.spent, day.units_left) == (30, 0)
    assert (await one("cron")).status == quota.EXHAUSTED  # at zero: exhausted for everyone


async def test_a_scheduled_run_stops_at_the_reserve_and_a_person_may_spend_it(pool, site):
    limits = dict(quota_daily_units=5, quota_reserve_units=2)
    # the operator's campaign (no owner, so no owner's share of the quota stops it first:
    # see test_user_limits.py for that)
    cid = await f.as_system(pool, "INSERT INTO campaigns (name, url) VALUES ('ops', $1) RETURNING id",
                            site.url + "/")
    await pool.execute("DELETE FROM jobs")  # eight plain pages instead of the brief
    async with pool.acquire() as conn, conn.transaction():
        await lock_pages(conn, cid)
        await discover(conn, cid, [f"{site.url}/fair/q/{i}" for i in range(8)], 1)

    cron = await run(pool, "cron", **limits)
    assert cron.stop_reason == "quota_reserve" and cron.error is None
    assert cron.units == 3 and cron.jobs_failed == 0 and cron.summary["stages"]["crawl"]["done"] == 3  # 5 less the reserve
    row = await pool.fetchrow("SELECT * FROM runs WHERE id = $1", cron.run_id)
    assert row["stop_reason"] == "quota_reserve" and row["quota_units"] == 3
    # the jobs that met the reserve wait, without a burned attempt, for a run that may spend it
    waiting = await pool.fetch("SELECT * FROM jobs WHERE type = 'crawl' AND status = 'pending'")
    assert len(waiting) == 5 and {j["attempts"] for j in waiting} == {0}
    assert max([await seconds_until(pool, j["run_after"]) for j in waiting]) <= 1
    assert any(j["run_id"] == cron.run_id for j in waiting)  # claimed, met the reserve, deferred
    # a refused fetch does not use up the campaign's page allowance either
    assert await pool.fetchval("SELECT pages FROM campaign_usage WHERE campaign_id = $1", cid) == 3

    manual = await run(pool, "manual", **limits)
    assert manual.stop_reason == "quota_exhausted" and manual.units == 2
    assert manual.summary["stages"]["crawl"]["done"] == 2
    assert await pool.fetchval("SELECT spent FROM quota_ledger") == 5

    # the manual run's handlers run side by side, so whether any of its jobs was left
    # unstarted (due now) or all met the empty quota (due tomorrow) is timing: one more
    # page makes sure the next run has a job to try
    async with pool.acquire() as conn, conn.transaction():
        await lock_pages(conn, cid)
        await discover(conn, cid, [f"{site.url}/fair/q/8"], 1)
    again = await run(pool, "cron", **limits)
    assert again.stop_reason == "quota_exhausted" and again.units == 0
    # at zero, the job that tried waits for the next UTC day, when the ledger starts afresh
    tomorrow = quota.next_utc_day()
    deferred = await pool.fetch("SELECT * FROM jobs WHERE type = 'crawl' AND run_id = $1", again.run_id)
    assert any(j["run_after"] == tomorrow and j["attempts"] == 0 for j in deferred)


def test_who_may_use_the_reserve():
    # a person: `python -m app run-once` (manual) or a curl of /cron/pipeline (http)
    assert quota.may_use_reserve("manual") and quota.may_use_reserve("http")
    # the schedule, a worker, anything unknown: not
    assert not any(quota.may_use_reserve(t) for t in ("cron", "worker", "test", ""))


async def test_the_examples_quota_gauges(pool):
    s = outreach_settings()
    await quota.spend(pool, 7, "manual", daily_units=s.quota_daily_units, reserve=s.quota_reserve_units)
    gauges = {g.name: g.value for g in await quota_gauges(pool, None)}
    spent = await pool.fetchval("SELECT spent FROM quota_ledger WHERE day = (now() AT TIME ZONE 'UTC')::date")
    assert gauges["quota_used_units"] == spent == 7
    assert gauges["quota_left_units"] == s.quota_daily_units - 7
    assert gauges["quota_reserve_units"] == s.quota_reserve_units
