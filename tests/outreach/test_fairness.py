"""Plans drive the claim order: pro before free, and campaigns of one plan take turns."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.pipeline.stage import Stage
from app.outreach import CRAWL_STAGE
from app.outreach.crawl import discover
from tests.outreach.conftest import campaign, run

PAGES = 3


async def test_pro_campaigns_go_first_and_take_turns_free_waits(pool, site):
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
    result = await run(pool, stages=one_at_a_time)
    assert result.jobs_done == 3 * PAGES
    order = [h.split("/")[2] for h in site.rec.hits if h.startswith("/fair/")]
    assert order[:2 * PAGES] in (["proA", "proB"] * PAGES, ["proB", "proA"] * PAGES)
    assert order[2 * PAGES:] == ["free"] * PAGES
