"""The shipped sample site, crawled end to end: what `make run`'s first tick produces."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette

from app.outreach.campaigns import seed_demo
from app.outreach.sample import mount_sample_site, robots_txt, sample_site_app
from app.api import create_app
from app.outreach.plugin import PLUGIN
from tests.api.serving_kit import free_socket, start_uvicorn
from tests.credentials import CRON_SECRET
from tests.outreach.conftest import reachable, run, settings
from tests.outreach.servers import ServerThread

EXPECTED = {
    "hello@northwind.test", "maya@northwind.test", "press@northwind.test", "partnerships@northwind.test",
    "https://www.youtube.com/@trailmaya", "https://www.instagram.com/northwind.outdoor",
    "https://www.tiktok.com/@northwindco", "https://x.com/northwindco", "https://www.twitch.tv/northwindlive",
}


def mounted_app():
    app = Starlette()
    mount_sample_site(app, "/sample")
    return app


@pytest.mark.parametrize("make_app, prefix", [(sample_site_app, ""), (mounted_app, "/sample")],
                         ids=["standalone", "mounted"])
async def test_the_first_tick_finds_the_contacts_and_drafts_them(pool, make_app, prefix):
    with reachable(ServerThread(make_app())) as server:
        base = f"{server.url}{prefix}/"
        cid = await seed_demo(pool, base)
        assert cid is not None and await seed_demo(pool, base) is None  # only into an empty database
        result = await run(pool, "cron")
    failed = await pool.fetch("SELECT type, payload, last_error FROM jobs WHERE attempts > 0 AND status <> 'done'")
    assert result.stop_reason == "no_work" and result.jobs_failed == 0, failed
    contacts = {r["value"] for r in await pool.fetch("SELECT value FROM contacts WHERE campaign_id = $1", cid)}
    assert contacts == EXPECTED  # and not the staff area's insider@
    assert await pool.fetchval("SELECT count(*) FROM drafts WHERE campaign_id = $1", cid) == len(EXPECTED)
    pages = {r["url"].removeprefix(base): r for r in await pool.fetch("SELECT * FROM pages WHERE campaign_id = $1", cid)}
    assert pages["private/"]["state"] == "blocked"
    assert pages["old-catalogue.html"]["status_code"] == 404
    assert pages["blog"]["state"] == "redirected" and pages["blog/"]["state"] == "fetched"
    assert not [u for u in pages if "example.org" in u]
    assert len(pages) == 14  # 11 public pages, the blocked one, the broken link, /blog
    s = result.summary["counts"]
    assert s["contacts_found"] == len(EXPECTED) and s["drafts_written"] == len(EXPECTED)
    brief = await pool.fetchrow("SELECT * FROM briefs WHERE campaign_id = $1", cid)
    assert brief["title"].startswith("Northwind Outdoor Co.") and "hiking" in brief["keywords"]
    # the live events say the same, in the campaign's lane room and its owner's account room
    owner = await pool.fetchval("SELECT user_id FROM campaigns WHERE id = $1", cid)
    for room in (f"lane:{cid}", f"account:{owner}"):
        found = await pool.fetch("SELECT type, sum((data->>'count')::int) AS n FROM events "
                                 "WHERE room = $1 AND type IN ('contacts.found', 'drafts.written') "
                                 "GROUP BY type ORDER BY type", room)
        assert [(r["type"], r["n"]) for r in found] == [("contacts.found", len(EXPECTED)),
                                                        ("drafts.written", len(EXPECTED))], room


def test_robots_rules_move_with_the_mount():
    assert "Disallow: /private/" in robots_txt()
    assert "Disallow: /sample/private/" in robots_txt("/sample/")


@pytest.mark.parametrize("make_app, prefix", [(sample_site_app, ""), (mounted_app, "/sample")],
                         ids=["standalone", "mounted"])
def test_the_directory_redirect_never_names_the_requests_host(make_app, prefix):
    """The red team's open redirect: GET /sample/blog with `Host: evil.example` answered
    `Location: http://evil.example/sample/blog/`. Now the Location is relative to the request's
    own path, whatever Host, X-Forwarded-Host or path it names."""
    import httpx
    from urllib.parse import urljoin

    with ServerThread(make_app()) as server:
        with httpx.Client(base_url=server.url, follow_redirects=False) as client:
            for path, headers in ((f"{prefix}/blog", {"Host": "evil.example"}),
                                  (f"{prefix}/blog?x=1", {"Host": "evil.example:443", "X-Forwarded-Host": "evil.example"}),
                                  (f"{prefix}/blog", {"Host": "//evil.example"})):
                r = client.get(path, headers=headers)
                assert r.status_code == 307, (path, r.status_code)
                location = r.headers["location"]
                assert "evil" not in location and location.startswith("./blog/"), location
                target = urljoin(f"{server.url}{path}", location)
                assert target.startswith(f"{server.url}{prefix}/blog/"), target
            # followed from the real origin, it lands on the page
            assert client.get(f"{prefix}/blog", follow_redirects=True).status_code == 200


async def test_make_runs_demo_campaign_is_crawled_from_its_own_sample_site(pool, dsn):
    """What `make run` does with the example (its dev_settings and dev_setup): the sample
    site served by the app itself on loopback, which the egress guard lets through because
    the plug-in lists it in FETCH_ALLOW_PRIVATE, and a demo campaign whose first run crawls it."""
    sock = free_socket()
    local = dict(database_url=dsn, run_scheduler=False, local_dev=True, cron_secret=CRON_SECRET,
                 local_port=sock.getsockname()[1])
    dev = settings(**local, **PLUGIN.dev_settings(settings(**local, fetch_allow_private="")))
    app = create_app(dev)
    assert await PLUGIN.dev_setup(app, pool, dev) is not None  # the demo campaign
    server, task, sock = await start_uvicorn(app, sock)
    try:
        result = await run(pool, "cron", **local, fetch_allow_private=dev.fetch_allow_private)
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
    crawled = await pool.fetch("SELECT status, last_error FROM jobs WHERE type = 'crawl'")
    assert crawled and {r["status"] for r in crawled} == {"done"}, [dict(r) for r in crawled]
    assert result.jobs_failed == 0
