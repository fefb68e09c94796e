"""A crawl people ask for under a dedupe key answers for an hour after it ended (the crawl
stage's unique_for): asking again meanwhile queues no second crawl of the page."""

from __future__ import annotations

from app.outreach.crawl import RECRAWL_WINDOW
from tests.outreach.conftest import campaign, run


async def test_asking_again_within_the_window_answers_with_the_crawl_that_ran(api, pool, site, admin_key):
    lane = str(await campaign(pool, site.url + "/"))
    await pool.execute("DELETE FROM jobs")  # the person's crawl alone, not the whole site's
    headers = {"Authorization": f"Bearer {admin_key}"}
    ask = {"type": "crawl", "lane": lane, "payload": {"url": f"{site.url}/new"}, "dedupe_key": "new"}

    first = await api.post("/jobs", headers=headers, json=ask)
    assert first.status_code == 201, first.text
    assert await pool.fetchval("SELECT unique_for FROM jobs WHERE id = $1::uuid", first.json()["job"]["id"]) \
        == RECRAWL_WINDOW  # the stage's, not asked for
    await run(pool)
    assert site.hits("/new") == 1

    again = await api.post("/jobs", headers=headers, json=ask)
    assert again.status_code == 200 and again.json()["created"] is False, again.text
    assert again.json()["job"]["id"] == first.json()["job"]["id"] and again.json()["job"]["status"] == "done"
    await run(pool)
    assert site.hits("/new") == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'crawl'") == 1

    # once the window is over the key is free again
    await pool.execute("UPDATE jobs SET finished_at = finished_at - $1::interval WHERE type = 'crawl'",
                       RECRAWL_WINDOW)
    later = await api.post("/jobs", headers=headers, json=ask)
    assert later.status_code == 201 and later.json()["job"]["id"] != first.json()["job"]["id"], later.text
