"""python -m app campaign add / contacts: good input, and one clear line for bad input."""

from __future__ import annotations

import json

import pytest

from app.outreach.campaigns import seed_demo
from tests.outreach import factories as f
from app.outreach.sample import sample_site_app
from tests.outreach.conftest import reachable, run
from tests.outreach.servers import ServerThread
from tests.test_migrate_cli import cli, one_line_error

EXAMPLE = {"PIPELINE_PLUGINS": "app.outreach.plugin:PLUGIN"}
CAMPAIGN = "00000000-0000-0000-0000-000000000007"


async def test_campaign_add_creates_the_owner_on_the_plan_and_queues_the_brief(dsn, pool):
    out = cli("campaign", "add", "HTTPS://Shop.Example.com", "--owner", "Ann@Example.com", "--plan", "pro",
              env=EXAMPLE, dsn=dsn)
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["url"] == "https://shop.example.com/" and made["plan"] == "pro"
    assert made["owner"] == "ann@example.com" and made["status"] == "active"
    assert await pool.fetchval("SELECT plan FROM subscriptions JOIN users ON users.id = user_id "
                               "WHERE email = 'ann@example.com'") == "pro"
    job = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1::uuid", made["briefJob"])
    assert job["type"] == "brief" and str(job["lane"]) == made["id"]
    # a second campaign for the same owner keeps their plan; no owner means the local default
    again = json.loads(cli("campaign", "add", "https://two.example.com", "--owner", "ann@example.com",
                           env=EXAMPLE, dsn=dsn).stdout)
    assert again["plan"] == "pro"
    local = json.loads(cli("campaign", "add", "https://three.example.com", env=EXAMPLE, dsn=dsn).stdout)
    assert local["owner"] == "owner@localhost" and local["plan"] == "free"


@pytest.mark.parametrize("args, needle", [
    (["campaign", "add", "not a url"], "is not an http(s) URL"),
    (["campaign", "add", "ftp://example.com"], "is not an http(s) URL"),
    (["campaign", "add", "https://"], "has no host"),
    (["campaign", "add", "https://ok.example", "--owner", "nobody"], "is not an e-mail address"),
    (["contacts", "42"], "is not a campaign id"),
    (["contacts", CAMPAIGN, "--limit", "0"], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit", "10001"], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit", "ten"], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit", "\u00b2"], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit", "9" * 40], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit=-1"], "argument --limit: must be a whole number from 1 to 10000"),
    (["contacts", CAMPAIGN, "--limit", "-1"], "argument --limit: must be a whole number from 1 to 10000"),
])
async def test_bad_input_is_one_line_and_nothing_is_made(dsn, pool, args, needle):
    one_line_error(cli(*args, env=EXAMPLE, dsn=dsn), needle)
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0


@pytest.mark.parametrize("command", [["contacts"], ["campaign", "pause"], ["campaign", "resume"]])
async def test_no_such_campaign_is_a_failure(dsn, command):
    """Exit 1, as `jobs show` with no such job: the command was fine, the campaign is not there."""
    out = cli(*command, "00000000-0000-0000-0000-000000000007", env=EXAMPLE, dsn=dsn)
    assert (out.returncode, out.stderr) == (1, "error: no campaign with id 00000000-0000-0000-0000-000000000007\n")


async def test_an_owner_keeps_their_plan(dsn, pool):
    cli("campaign", "add", "https://a.example", "--owner", "bo@example.com", "--plan", "free", env=EXAMPLE, dsn=dsn)
    one_line_error(cli("campaign", "add", "https://b.example", "--owner", "bo@example.com", "--plan", "pro",
                       env=EXAMPLE, dsn=dsn), "is on the free plan already")
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 1


async def test_campaign_commands_come_with_the_plug_in(dsn, pool):
    """Without the example plug-in there is no `campaign` command (so no campaign whose
    brief nothing would run)."""
    out = cli("campaign", "add", "https://a.example", env={"PIPELINE_PLUGINS": ""}, dsn=dsn)
    assert out.returncode == 2 and "invalid choice: 'campaign'" in out.stderr
    assert await pool.fetchval("SELECT count(*) FROM campaigns") == 0


async def test_contacts_prints_a_table(dsn, pool):
    with reachable(ServerThread(sample_site_app())) as server:
        cid = await seed_demo(pool, server.url + "/")
        empty = cli("contacts", str(cid), dsn=dsn)
        assert empty.returncode == 0 and "No contacts yet" in empty.stdout
        await run(pool)
    out = cli("contacts", str(cid), "--drafts", dsn=dsn)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "free plan, owner@localhost, active" in lines[0] and lines[1].startswith("9 contacts, 9 drafts")
    header = next(i for i, line in enumerate(lines) if line.startswith("KIND"))
    assert lines[header].split() == ["KIND", "CONTACT", "FOUND", "ON", "DRAFT"]
    rows = [line.split() for line in lines[header + 1:header + 10]]
    assert {r[1] for r in rows} >= {"press@northwind.test", "https://www.twitch.tv/northwindlive"}
    assert {r[-1] for r in rows} == {"written"}
    assert ["email", "press@northwind.test", "/press.html", "written"] in rows
    assert "--- press@northwind.test (template)" in out.stdout and "Hi there," in out.stdout


async def _campaign_with_contacts(pool, n: int):
    """A campaign with `n` contacts found a millisecond apart (c000 first), each drafted."""
    cid = await f.campaign(pool, None, name="many")
    page = await pool.fetchval("INSERT INTO pages (campaign_id, url) VALUES ($1, 'https://many.example/') "
                               "RETURNING id", cid)
    await pool.execute(
        "INSERT INTO contacts (campaign_id, kind, value, page_id, page_url, created_at) "
        "SELECT $1, 'email', format('c%s@many.example', lpad(i::text, 3, '0')), $2, 'https://many.example/team', "
        "now() - interval '1 hour' + i * interval '1 millisecond' FROM generate_series(0, $3 - 1) i", cid, page, n)
    await pool.execute("INSERT INTO drafts (campaign_id, contact_id, body, model) "
                       "SELECT campaign_id, id, 'Hi ' || value, 'template' FROM contacts WHERE campaign_id = $1", cid)
    return cid


def _listed(out) -> list[str]:
    """The CONTACT column of `contacts`'s table."""
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("KIND"))
    return [line.split()[1] for line in lines[header + 1:] if line.startswith("email ")]


async def test_contacts_lists_at_most_limit_the_first_found_first(dsn, pool):
    cid = await _campaign_with_contacts(pool, 105)
    everyone = [f"c{i:03d}@many.example" for i in range(105)]

    default = cli("contacts", str(cid), dsn=dsn)
    assert _listed(default) == everyone[:100]
    assert default.stdout.splitlines()[1].startswith("105 contacts, 105 drafts")  # the count is the campaign's
    assert default.stdout.rstrip().endswith("(the first 100 of 105; --limit for more)")

    three = cli("contacts", str(cid), "--limit", "3", "--drafts", dsn=dsn)
    assert _listed(three) == everyone[:3]
    assert "(the first 3 of 105; --limit for more)" in three.stdout
    assert three.stdout.count("--- c") == 3  # only the listed contacts' drafts

    every = cli("contacts", str(cid), "--limit=0105", dsn=dsn)
    assert _listed(every) == everyone and "--limit for more" not in every.stdout


def _hostile_site():
    """A tenant's site whose title and description carry terminal escapes and a bidi override."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, PlainTextResponse
    from starlette.routing import Route

    home = ("<html><head><title>Evil\x1b]0;pwned\x07\x1b[2J Shop</title>"
            "<meta name=\"description\" content=\"We sell\x1b[8m hidden\u202eoof\">"
            "</head><body><a href=\"mailto:alice@evil.test\">alice</a></body></html>")
    return Starlette(routes=[Route("/", lambda r: HTMLResponse(home)),
                             Route("/robots.txt", lambda r: PlainTextResponse("", status_code=404))])


async def test_contacts_shows_a_hostile_sites_words_escaped(dsn, pool):
    """A draft is written from the crawled page's title and description: `contacts --drafts`
    prints its lines, but never the site's raw ESC (which would retitle the operator's
    window and clear the screen) or U+202E."""
    with reachable(ServerThread(_hostile_site())) as server:
        cid = await seed_demo(pool, server.url + "/")
        await run(pool)
    out = cli("contacts", str(cid), "--drafts", dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "alice@evil.test" in out.stdout and "Hi alice," in out.stdout  # the draft's lines stay lines
    assert not {"\x1b", "\x07", "\u202e"} & set(out.stdout), out.stdout
    assert "Evil\\x1b]0;pwned\\x07\\x1b[2J Shop" in out.stdout and "hidden\\u202eoof" in out.stdout


async def test_the_cli_checks_a_payload_against_its_stage(dsn, pool):
    one_line_error(cli("enqueue", "crawl", "--payload", '{"url": "http://127.0.0.1/"}', dsn=dsn),
                   "not public")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    one_line_error(cli("enqueue", "crawl", "--payload", '{"url": "https://example.com/", "depth": "2"}',
                       dsn=dsn), "integer")  # a number is a JSON number, as on the API
    good = '{"url": "https://example.com/", "depth": 2}'
    # a payload that fits is still the stage's to refuse: a crawl needs a campaign whose site it is on
    one_line_error(cli("enqueue", "crawl", "--payload", good, dsn=dsn), "has no campaign")
    lane = await f.campaign(pool, await f.user(pool))
    await f.as_system(pool, "UPDATE campaigns SET url = 'https://example.com/' WHERE id = $1", lane)
    out = cli("enqueue", "crawl", "--lane", str(lane), "--payload", good, dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert await pool.fetchval("SELECT payload FROM jobs") == {"url": "https://example.com/", "depth": 2}


async def test_a_bad_setting_of_the_example_is_one_readable_line(dsn):
    # read as the plug-in is imported: named as itself, not as an import failure
    one_line_error(cli("run-once", env={"QUOTA_DAILY_UNITS": "-1"}, dsn=dsn), "error: bad setting QUOTA_DAILY_UNITS")
