"""Operating campaigns: one per owner and URL (API, CLI, concurrent requests, old
databases), GET /campaigns, pause and resume, and the sample site under `make run`
moving to another port."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import uuid
import httpx
import pytest

from app.api import create_app
from app.plugin import CommandFailed
from app.engine import accounts
from app.engine.tenancy import act_as, tenant_transaction
from app.outreach import BRIEF_STAGE, STAGES
from app.outreach.campaigns import add_campaign_in, seed_demo
from app.outreach.commands import add_commands
from app.outreach.sample import SAMPLE_SITE_URL
from app.outreach.settings import using_outreach_settings
from app.outreach.sql import SQL, statement
from app.outreach.store import set_plan
from app.outreach.web import WebClient
from bench.explain import explain, rows_filtered_away
from tests.outreach import factories as f
from tests.outreach.conftest import example_settings, reachable, run, settings
from tests.outreach.servers import ServerThread
from tests.outreach.test_sample_site import mounted_app
from tests.sample_stages import STAGES as ECHO_STAGES
from tests.test_migrate_cli import cli

MIGRATION = SQL / "migrations" / "0010_campaign_url_unique.sql"


@pytest.fixture
async def app(dsn):
    made = create_app(settings(database_url=dsn, run_scheduler=False))
    yield made
    await made.state.runtime.close()


def client(app, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                             headers={"Authorization": f"Bearer {key}"})


async def test_the_same_url_for_the_same_owner_is_one_campaign(app, pool, admin_key):
    async with client(app, admin_key) as api:
        first = await api.post("/campaigns", json={"url": "https://shop.example.com", "owner": "ann@example.com"})
        assert first.status_code == 201 and first.json()["created"] is True and first.json()["briefJob"]
        # the same URL as normalize_url reads it: the campaign that is there, nothing queued
        again = await api.post("/campaigns", json={"url": "HTTPS://Shop.Example.com/", "owner": "ann@example.com"})
        assert again.status_code == 200, again.text
        assert (again.json()["id"], again.json()["created"], again.json()["briefJob"]) == (first.json()["id"], False, None)
        assert again.headers["location"] == f"/campaigns/{first.json()['id']}"
        other = await api.post("/campaigns", json={"url": "https://shop.example.com", "owner": "bob@example.com"})
        assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
        # eight identical requests at once for a new owner: one campaign, one brief
        racing = await asyncio.gather(*(api.post("/campaigns", json={"url": "https://race.example.com",
                                                                     "owner": "cy@example.com"})
                                        for _ in range(8)))
    assert sorted(r.status_code for r in racing) == [200] * 7 + [201], [r.text for r in racing]
    assert len({r.json()["id"] for r in racing}) == 1
    assert await pool.fetchval("SELECT count(*) FROM campaigns WHERE url = 'https://race.example.com/'") == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'brief'") == 3
    # the index holds against plain SQL too
    with pytest.raises(Exception, match="campaigns_owner_url_key"):
        await f.as_system(pool, "INSERT INTO campaigns (user_id, url) SELECT user_id, url FROM campaigns "
                                "WHERE id = $1", uuid.UUID(first.json()["id"]))


async def test_repeats_from_before_keep_their_data_and_the_oldest_is_found(pool):
    """The migration on a database that already has two campaigns of one owner on one URL."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:  # everything here is rolled back, the schema change included
            await act_as(conn, f.TEST_ACTOR)
            await conn.execute("DROP INDEX campaigns_owner_url_key")
            await conn.execute("ALTER TABLE campaigns DROP COLUMN duplicate")
            owner = await accounts.add_user(conn, "old@example.com")
            await set_plan(conn, owner, "free")
            older, newer, elsewhere = [await conn.fetchval(
                "INSERT INTO campaigns (user_id, url, created_at) VALUES ($1, $2, now() - $3 * interval '1 day') "
                "RETURNING id", owner, url, age)
                for url, age in (("https://old.example/", 3), ("https://old.example/", 1), ("https://b.example/", 2))]
            await conn.execute(MIGRATION.read_text())
            marked = dict(await conn.fetch("SELECT id, duplicate FROM campaigns"))
            assert marked == {older: False, newer: True, elsewhere: False}
            made = await add_campaign_in(conn, "https://old.example", owner="old@example.com")
            assert (made["id"], made["created"]) == (older, False)
        finally:
            await tx.rollback()
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0


async def test_list_pause_and_resume_over_the_api(app, pool, admin_key):
    ann_key = await f.api_key(pool, "ann@example.com", plan="pro")
    bob_key = await f.api_key(pool, "bob@example.com")
    async with client(app, ann_key) as ann, client(app, bob_key) as bob, client(app, admin_key) as admin:
        ids = [(await ann.post("/campaigns", json={"url": f"https://s{i}.example"})).json()["id"] for i in range(3)]
        bobs = (await bob.post("/campaigns", json={"url": "https://bob.example"})).json()["id"]

        seen, cursor = [], None
        while True:  # keyset pages of one, newest first; only Ann's
            page = (await ann.get("/campaigns", params={"limit": 1, **({"cursor": cursor} if cursor else {})})).json()
            seen += [c["id"] for c in page["data"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == ids[::-1]
        assert {c["id"] for c in (await admin.get("/campaigns")).json()["data"]} == {*ids, bobs}
        for bad, code in (({"status": "stopped"}, "invalid_parameter"), ({"limit": "0"}, "invalid_parameter"),
                          ({"owner": "ann@example.com"}, "unknown_parameter")):
            r = await ann.get("/campaigns", params=bad)
            assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text

        paused = await ann.post(f"/campaigns/{ids[0]}/pause")
        assert paused.status_code == 200 and paused.json()["status"] == "paused"
        assert (await ann.post(f"/campaigns/{ids[0]}/pause")).json()["status"] == "paused"  # no change, no error
        assert (await bob.post(f"/campaigns/{ids[1]}/pause")).status_code == 404  # not Bob's to see
        assert [c["id"] for c in (await ann.get("/campaigns", params={"status": "paused"})).json()["data"]] == [ids[0]]

        # a paused campaign's lane is not claimed; resumed, it is
        lane = uuid.UUID(ids[0])
        await f.jobs(pool, "echo", 2, lane=lane)
        assert (await run(pool, stages=ECHO_STAGES)).jobs_done == 0
        assert (await ann.post(f"/campaigns/{ids[0]}/resume")).json()["status"] == "active"
        assert (await run(pool, stages=ECHO_STAGES)).jobs_done == 2
    assert await pool.fetchval("SELECT array_agg(DISTINCT status) FROM jobs WHERE lane = $1 AND type = 'echo'", lane) == ["done"]
    updates = await pool.fetch("SELECT actor_kind, new_row->>'status' AS status FROM audit_log "
                               "WHERE table_name = 'campaigns' AND op = 'UPDATE' ORDER BY id")
    assert [tuple(u) for u in updates] == [("user", "paused"), ("user", "active")]  # the repeat changed nothing


async def command(dsn, *argv: str) -> str:
    """A campaign command as the CLI runs it, parsed through the plug-in's own parsers but
    in this process (each trip through the real entry point costs seconds of imports)."""
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(argv)
    return await args.handler(args, settings(), dsn)


async def test_campaign_commands(dsn, pool):
    env = {"PIPELINE_PLUGINS": "app.outreach.plugin:PLUGIN"}
    made = [json.loads(cli("campaign", "add", url, "--owner", "ann@example.com", env=env, dsn=dsn).stdout)
            for url in ("https://cli.example", "https://CLI.example/")]
    assert [m["created"] for m in made] == [True, False] and made[0]["id"] == made[1]["id"]
    assert made[1]["briefJob"] is None
    cid = made[0]["id"]
    assert await command(dsn, "campaign", "pause", cid) == f"campaign {cid} paused"
    assert await command(dsn, "campaign", "pause", cid) == f"campaign {cid} was paused already"
    assert await pool.fetchval("SELECT status FROM campaigns") == "paused"
    table = (await command(dsn, "campaign", "ls")).splitlines()
    assert table[0].split()[:4] == ["ID", "STATUS", "PLAN", "OWNER"]
    assert table[1].split()[:4] == [cid, "paused", "free", "ann@example.com"]
    assert table[1].endswith("https://cli.example/")
    assert json.loads(await command(dsn, "campaign", "ls", "--status", "active", "--json")) == {"data": []}
    assert await command(dsn, "campaign", "resume", cid) == f"campaign {cid} resumed"
    listed = json.loads(await command(dsn, "campaign", "ls", "--json"))["data"]
    assert [(c["id"], c["status"], c["counts"]["contacts"]) for c in listed] == [(cid, "active", 0)]
    with pytest.raises(CommandFailed, match="no campaign with id"):
        await command(dsn, "campaign", "resume", str(uuid.uuid4()))
    actors = await pool.fetch("SELECT DISTINCT actor_kind, actor_id FROM audit_log WHERE table_name IN "
                              "('campaigns', 'users', 'subscriptions')")
    assert [tuple(a) for a in actors] == [("system", "cli")]


async def test_the_sample_campaign_keeps_working_when_make_run_moves_to_another_port(pool):
    def dev(server: ServerThread):  # what `make run` on that port has: local dev mode, its own address listed
        return dict(local_dev=True, local_host="127.0.0.1", local_port=server.port)
    patient = example_settings(fetch_timeout_seconds=5)  # a busy machine is no failure here

    cid = await seed_demo(pool, SAMPLE_SITE_URL)
    with reachable(ServerThread(mounted_app())) as first:
        brief = await run(pool, "cron", stages=[BRIEF_STAGE], fetch_timeout_seconds=5, **dev(first))
        assert brief.jobs_done == 1 and brief.jobs_failed == 0
    assert await pool.fetchval("SELECT url FROM campaigns WHERE id = $1", cid) == "http://sample.localhost/sample/"
    with reachable(ServerThread(mounted_app())) as second:  # a new port
        result = await run(pool, "cron", stages=STAGES, fetch_timeout_seconds=5, **dev(second))
        assert result.stop_reason == "no_work" and result.jobs_failed == 0
        assert await pool.fetchval("SELECT count(*) FROM contacts WHERE campaign_id = $1", cid) == 9
        assert not await pool.fetchval("SELECT count(*) FROM pages WHERE url NOT LIKE 'http://sample.localhost/%'")

        # no egress hole: outside local dev mode the alias is a local name, refused; and in
        # local dev mode it reaches only an address FETCH_ALLOW_PRIVATE lists
        with_list = settings(**dev(second))
        without = settings(**{**dev(second), "fetch_allow_private": ""})
        for queue_settings in (settings(local_port=second.port), without):
            fetched = await WebClient.from_settings(queue_settings).get(SAMPLE_SITE_URL)
            assert fetched.outcome == "blocked"
        with using_outreach_settings(patient):
            assert (await WebClient.from_settings(with_list).get(SAMPLE_SITE_URL)).outcome == "ok"


async def test_a_deep_page_of_campaigns_reads_the_index_not_the_table(pool):
    """The keyset is one row comparison that is never NULL, so even a generic plan walks
    campaigns_listing_idx back from the cursor: no sort of every campaign."""
    await f.as_system(pool, """INSERT INTO campaigns (name, created_at)
        SELECT 'c' || g, now() - make_interval(secs => g) FROM generate_series(1, 3000) g""")
    await pool.execute("ANALYZE campaigns")
    at, last_id = await pool.fetchrow(
        "SELECT created_at, id FROM campaigns ORDER BY created_at DESC, id DESC OFFSET 2000 LIMIT 1")
    async with pool.acquire() as conn:
        sql, *args = statement("campaigns_page").bind(status=None, at=at, last_id=last_id, limit=51, own=False)
        plan = await explain(conn, sql, tuple(args))
    assert "Index Scan Backward using campaigns_listing_idx" in plan, plan
    # the page's rows in order (a sort of the page's at most 51, not of every campaign)
    assert all(int(n) <= 51 for n in re.findall(r"Sort \(actual[^\n]*rows=(\d+)", plan)), plan
    # it starts at the cursor, not at the newest row with the 2,000 newer ones filtered away
    at_ = f"${statement('campaigns_page').names.index('at') + 1}"
    assert f"Index Cond: (ROW(created_at, id) < ROW(COALESCE({at_}" in plan, plan
    assert "Rows Removed by Filter" not in plan, plan


@pytest.mark.parametrize("name, order", [("contacts_page", "Backward"), ("contacts_list", "")])
async def test_a_deep_page_of_contacts_reads_the_index_not_the_campaign(pool, name, order):
    """A campaign's contacts, newest first (the API) and in the order found (the CLI)."""
    campaign = await f.campaign(pool)
    await pool.execute("""INSERT INTO contacts (campaign_id, kind, value, page_url, created_at)
        SELECT $1, 'email', 'c' || g || '@example.com', 'https://example.com/', now() - make_interval(secs => g)
        FROM generate_series(1, 3000) g""", campaign)
    await pool.execute("ANALYZE contacts")
    at, last_id = await pool.fetchrow(
        "SELECT created_at, id FROM contacts ORDER BY created_at DESC, id DESC OFFSET 1500 LIMIT 1")
    async with pool.acquire() as conn:
        sql, *args = statement(name).bind(campaign_id=campaign, at=at, last_id=last_id, limit=51)
        plan = await explain(conn, sql, tuple(args))
    assert f"Index Scan {order} using contacts_listing_idx".replace("  ", " ") in plan, plan
    at_ = f"${statement(name).names.index('at') + 1}"
    assert f"COALESCE({at_}" in plan.split("Index Cond:")[1].split("\n")[0], plan
    assert "Sort" not in plan and "Rows Removed by Filter" not in plan, plan


async def test_a_tenants_campaign_page_reads_its_own_campaigns(pool):
    """The same rows as row-level security leaves of every campaign, read off the owner's
    index: none of another tenant's 3,000 campaigns is read."""
    alice = await f.api_key(pool, "alice@a.example", plan="pro")
    owner = (await accounts.authenticate(pool, alice)).user_id
    mine = [await f.campaign(pool, owner, name=f"a{i}") for i in range(7)]
    paused = await f.campaign(pool, owner, status="paused", name="a-paused")
    bob = await f.user(pool, "pro")
    await f.as_system(pool, """INSERT INTO campaigns (user_id, name, created_at)
        SELECT $1, 'b' || g, now() - make_interval(secs => g) FROM generate_series(1, 3000) g""", bob)
    await pool.execute("ANALYZE campaigns")
    async with tenant_transaction(pool, await accounts.authenticate(pool, alice)) as conn:
        for status in (None, "active", "paused"):
            pages = {}
            for own in (False, True):
                seen, after = [], (None, None)
                while True:
                    rows = await conn.fetch(*statement("campaigns_page").bind(
                        status=status, at=after[0], last_id=after[1], limit=3, own=own))
                    seen += [r["id"] for r in rows]
                    if len(rows) < 3:
                        break
                    after = (rows[-1]["created_at"], rows[-1]["id"])
                pages[own] = seen
            assert pages[True] == pages[False], status
            assert set(pages[True]) == {None: {*mine, paused}, "active": set(mine), "paused": {paused}}[status]
        sql, *args = statement("campaigns_page").bind(status=None, at=None, last_id=None, limit=51, own=True)
        plan = await explain(conn, sql, tuple(args))
    assert "campaigns_owner_listing_idx" in plan, plan
    removed = rows_filtered_away(plan)
    assert all(n < 100 for n in removed), plan
