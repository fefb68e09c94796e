"""The example ranks its campaigns' lanes (tests/test_engine_claim.py has the claim): a
campaign's lane runs at its owner's plan's priority and stops while the campaign is
paused, whoever changes the plan or the campaign, in plain SQL too."""

from __future__ import annotations

import uuid

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.migrate import chain, migrate
from app.outreach.plans import OWNERLESS_PLAN, PLANS
from app.outreach.plugin import PLUGIN
from tests.outreach import factories as f
from tests.test_engine_claim import insert_jobs, pausing_stops_the_lane

ZERO = uuid.UUID(int=0)


async def test_paused_campaign_is_not_claimed_until_resumed(pool):
    owner = await f.user(pool, "pro")
    paused = await f.campaign(pool, owner, status="paused")
    await f.jobs(pool, "t", 3, lane=paused)
    run_id = await f.run(pool)
    assert await q.claim(pool, f.lease(), run_id, 10) == []
    await f.as_system(pool, "UPDATE campaigns SET status = 'active' WHERE id = $1", paused)
    assert len(await q.claim(pool, f.lease(), run_id, 10)) == 3


async def test_a_plain_insert_lands_in_its_campaigns_lane_at_its_plan_priority(pool):
    pro, free = await f.user(pool, "pro"), await f.user(pool, "free")
    c_pro, c_free = await f.campaign(pool, pro), await f.campaign(pool, free)
    # what any client may write, oldest first: free's job, the ownerless one, pro's
    await pool.execute("INSERT INTO jobs (type, lane, created_at) VALUES "
                       "('t', $1, now() - interval '3 minutes'), ('t', DEFAULT, now() - interval '2 minutes'), "
                       "('t', $2, now() - interval '1 minute')", c_free, c_pro)
    lanes = {r["lane"]: (r["priority"], r["pending"])
             for r in await pool.fetch("SELECT lane, priority, pending FROM job_lanes WHERE type = 't'")}
    assert lanes == {c_pro: (PLANS["pro"].priority, 1), c_free: (PLANS["free"].priority, 1),
                     ZERO: (PLANS[OWNERLESS_PLAN].priority, 1)}
    got = [(await q.claim(pool, f.lease(), await f.run(pool), 1))[0].lane for _ in range(3)]
    assert got == [c_pro, ZERO, c_free]


async def test_a_plan_changed_in_plain_sql_reorders_the_claim(pool):
    a_owner, b_owner = await f.user(pool, "free"), await f.user(pool, "standard")
    a, b = await f.campaign(pool, a_owner), await f.campaign(pool, b_owner)
    await insert_jobs(pool, a, 5, 60)
    await insert_jobs(pool, b, 5, 60)
    run_id = await f.run(pool)

    async def next_lane():
        [job] = await q.claim(pool, f.lease(), run_id, 1)
        return job.lane

    assert await next_lane() == b  # standard before free
    await f.as_system(pool, "UPDATE subscriptions SET plan = 'pro' WHERE user_id = $1", a_owner)
    assert await next_lane() == a
    await f.as_system(pool, "DELETE FROM subscriptions WHERE user_id = $1", a_owner)  # back to free
    assert await next_lane() == b
    await f.as_system(pool, "INSERT INTO subscriptions (user_id, plan) VALUES ($1, 'pro')", a_owner)
    assert await next_lane() == a
    new_owner = await f.user(pool, "free")
    await f.as_system(pool, "UPDATE campaigns SET user_id = $1 WHERE id = $2", new_owner, a)  # a changes hands
    assert await next_lane() == b


async def test_pausing_a_campaign_in_plain_sql_stops_its_lane_stale_leases_included(pool):
    pro, free = await f.user(pool, "pro"), await f.user(pool, "free")
    busy, other = await f.campaign(pool, pro), await f.campaign(pool, free)
    await pausing_stops_the_lane(pool, busy, other, "UPDATE campaigns SET status = 'paused' WHERE id = $1",
                                 "UPDATE campaigns SET status = 'active' WHERE id = $1")


async def test_naming_the_plug_in_later_adds_its_chain_and_ranks_the_lanes_there(new_database):
    db = await connect(await new_database())
    try:
        await migrate(db, [])
        lane = uuid.uuid4()
        await db.execute("INSERT INTO jobs (type, lane) VALUES ('t', $1)", lane)  # ownerless, priority 0
        assert await migrate(db, [PLUGIN]) == [v for v, _ in chain([PLUGIN]) if v.startswith("outreach/")]
        assert await db.fetchval("SELECT priority FROM lanes WHERE id = $1", lane) == PLANS[OWNERLESS_PLAN].priority
    finally:
        await db.close()
