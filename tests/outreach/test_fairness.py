"""Plans drive the claim order: pro before free, and campaigns of one plan take turns."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from app.engine.tenancy import acting
from app.outreach.plans import DEFAULT_PLAN, OWNERLESS_PLAN, PLANS
from app.outreach.store import set_plan
from app.pipeline.stage import Stage
from app.outreach import CRAWL_STAGE
from app.outreach.crawl import discover
from tests.outreach import factories as f
from tests.outreach.conftest import campaign, run

PAGES = 3


@pytest.mark.parametrize("streams", [1, 2])
async def test_pro_campaigns_go_first_and_take_turns_free_waits(pool, site, streams):
    tags = {}
    for tag, plan in (("free", "free"), ("proA", "pro"), ("proB", "pro")):
        cid = await campaign(pool, site.url + "/", plan=plan, owner=f"{tag}@example.com")
        tags[cid] = tag
    await pool.execute("DELETE FROM jobs")  # no briefs: just each campaign's pages
    for cid, tag in tags.items():
        async with pool.acquire() as conn, conn.transaction():
            await discover(conn, cid, [f"{site.url}/fair/{tag}/{i}" for i in range(PAGES)], 1)
    # the free campaign's work is the oldest, proA's next, then proB's: plan beats age
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    rank = {"free": 0, "proA": 1, "proB": 2}
    jobs = await pool.fetch("SELECT id, payload FROM jobs")
    jobs.sort(key=lambda j: (rank[j["payload"]["url"].split("/")[-2]], j["payload"]["url"]))
    for n, job in enumerate(jobs):
        await pool.execute("UPDATE jobs SET created_at = $2 WHERE id = $1", job["id"],
                           start + timedelta(milliseconds=n))
    one_at_a_time = [Stage(type="crawl", handler=CRAWL_STAGE.handler, batch=1)]
    result = await run(pool, stages=one_at_a_time, pipeline_claim_streams=streams)
    assert result.jobs_done == 3 * PAGES
    if streams == 1:  # one claim at a time: the exact order
        order = [h.split("/")[2] for h in site.rec.hits if h.startswith("/fair/")]
        assert order[:2 * PAGES] in (["proA", "proB"] * PAGES, ["proB", "proA"] * PAGES)
        assert order[2 * PAGES:] == ["free"] * PAGES
        return
    # Two claims in flight at once, as with two overlapping runs: the order of the claims
    # (each job's locked_at) puts every pro page before every free one, and the two pro
    # campaigns stay within two pages of each other all along.
    claimed = [j["payload"]["url"].split("/")[-2] for j in await pool.fetch(
        "SELECT payload FROM jobs WHERE type = 'crawl' ORDER BY locked_at, id")]
    assert sorted(claimed[:2 * PAGES]) == ["proA"] * PAGES + ["proB"] * PAGES
    assert claimed[2 * PAGES:] == ["free"] * PAGES
    for k in range(1, 2 * PAGES + 1):
        assert abs(claimed[:k].count("proA") - claimed[:k].count("proB")) <= 2, claimed


async def test_plan_priorities_in_sql_are_the_plans(pool):
    # the triggers rank lanes from this view; a plan added or re-prioritised in PLANS
    # needs a migration that changes it (and re-ranks the lanes)
    rows = await pool.fetch("SELECT plan, priority FROM plan_priorities")
    assert {r["plan"]: r["priority"] for r in rows} == {name: p.priority for name, p in PLANS.items()}


async def lane_ranks(pool) -> dict:
    rows = await pool.fetch("SELECT l.id, l.owner_id, l.priority, l.paused, "
                            "       array_agg(DISTINCT (j.priority, j.paused)::text) AS copies "
                            "FROM lanes l LEFT JOIN job_lanes j ON j.lane = l.id GROUP BY l.id")
    ranks = {}
    for r in rows:
        # every job type's counter row carries the lane's ranking
        assert r["copies"] in ([None], [f"({r['priority']},{'t' if r['paused'] else 'f'})"]), dict(r)
        ranks[r["id"]] = (r["owner_id"], r["priority"], r["paused"])
    return ranks


async def test_every_lane_runs_at_its_owners_plan_whoever_changes_it(pool):
    owners = {plan: await f.user(pool, plan) for plan in PLANS}
    owners["none"] = await f.user(pool, None)  # no subscription: DEFAULT_PLAN
    lanes = {key: await f.campaign(pool, owner) for key, owner in owners.items()}
    lanes["nobody's"] = await f.campaign(pool, None)
    await pool.execute("INSERT INTO jobs (type, lane) SELECT t, c FROM unnest($1::uuid[]) c, "
                       "unnest(ARRAY['a', 'b']) t", list(lanes.values()))
    await pool.execute("INSERT INTO jobs (type) VALUES ('a')")  # the ownerless lane
    expected = {lanes[plan]: (owners[plan], p.priority, False) for plan, p in PLANS.items()}
    expected[lanes["none"]] = (owners["none"], PLANS[DEFAULT_PLAN].priority, False)
    expected[lanes["nobody's"]] = (None, PLANS[OWNERLESS_PLAN].priority, False)
    expected[uuid.UUID(int=0)] = (None, PLANS[OWNERLESS_PLAN].priority, False)
    assert await lane_ranks(pool) == expected

    async with acting(pool, f.TEST_ACTOR) as conn:  # the app's own queries
        await set_plan(conn, owners["free"], "pro")
        await conn.execute("UPDATE campaigns SET status = 'paused' WHERE id = $1", lanes["pro"])
    expected[lanes["free"]] = (owners["free"], PLANS["pro"].priority, False)
    expected[lanes["pro"]] = (owners["pro"], PLANS["pro"].priority, True)
    assert await lane_ranks(pool) == expected

    await f.as_system(pool, "DELETE FROM users WHERE id = $1", owners["standard"])
    del expected[lanes["standard"]]  # the campaign, its jobs and its lane are gone
    assert await lane_ranks(pool) == expected
