"""Hostile sites a security test found ways to hurt the crawler with: a huge robots.txt, a
page of e-mail addresses, a charset whose decoder is quadratic or raises, links and
redirects that httpx or PostgreSQL refuse. Each is served by a real local site and read by
the real client or pipeline; the event loop must keep answering meanwhile (a probe on the
same loop measures how late it ran), and each page ends in a documented outcome."""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import asynccontextmanager

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.outreach import STAGES
from app.outreach.extract import EMAIL, MAX_CONTACTS_PER_PAGE, addresses, read_contacts
from app.outreach.urls import MAX_URL_BYTES, BadUrl, normalize_url
from app.outreach.web import ROBOTS_MAX_BYTES, WebClient
from tests.outreach.conftest import campaign, pages, reachable, run
from tests.outreach.servers import ServerThread

MB = 1_000_000
LATE_WITHIN = 0.5  # as test_html's /health/live: a loaded 2-core box, tens of ms; a stall, seconds
US = "SkiplockBot/0.1 (test)"


@asynccontextmanager
async def loop_lateness():
    """How late, at worst, a task that wakes every 10 ms ran while the block ran: a
    stalled event loop shows here as it would on /health/live."""
    worst = [0.0]
    done = asyncio.Event()

    async def probe():
        while not done.is_set():
            due = time.monotonic() + 0.01
            await asyncio.sleep(0.01)
            worst[0] = max(worst[0], time.monotonic() - due)

    task = asyncio.create_task(probe())
    try:
        yield worst
    finally:
        done.set()
        await task


def serve(routes: dict[str, Response]) -> ServerThread:
    """A site answering each path with its fixed response (404 elsewhere)."""
    async def endpoint(request: Request):
        return routes.get(request.url.path) or PlainTextResponse("not found", status_code=404)
    return ServerThread(Starlette(routes=[Route("/{path:path}", endpoint)]))


def web(server: ServerThread, max_bytes: int = 4 * MB) -> WebClient:
    return WebClient(user_agent=US, timeout=10, max_bytes=max_bytes, allow_private=f"127.0.0.1:{server.port}")


# -- robots.txt ---------------------------------------------------------------------------

async def test_a_huge_robots_txt_is_cut_at_500_kib_and_read_off_the_loop():
    # 1.9 MB of rules: protego took seconds to parse it and tenths of a second per URL to
    # match, all on the event loop; past 500 KiB nothing is read (RFC 9309 2.5)
    filler = "Disallow: /*a$\n" * ((19 * MB // 10) // 15)
    robots = f"User-agent: *\nDisallow: /early\n{filler}Disallow: /late\n"
    assert len(robots) > 3 * ROBOTS_MAX_BYTES and robots.index("/late") > ROBOTS_MAX_BYTES
    with serve({"/robots.txt": PlainTextResponse(robots)}) as server:
        client = web(server)
        async with loop_lateness() as late:
            started = time.monotonic()
            verdicts = [await client.allowed(f"{server.url}{path}") for path in ("/early", "/late", "/page", "/a")]
            took = time.monotonic() - started
    assert verdicts == [False, True, True, False]  # the rule past the cut was never read
    assert late[0] < LATE_WITHIN, f"the event loop ran {late[0]:.2f}s late (the checks took {took:.2f}s)"


async def test_robots_txt_cut_at_500_kib_loses_its_half_line():
    # cut mid-line, "Disallow: /private" became "Disallow: /" (the whole site refused) and,
    # the other way round, "Allow: /public" became "Allow: /" (a disallowed page fetched)
    head = "User-agent: *\nDisallow: /\n" + "Allow: /public/x\n" * 30_000
    robots = head + "\n" * (ROBOTS_MAX_BYTES - 8 - len(head)) + "Allow: /public/\n"
    assert robots[:ROBOTS_MAX_BYTES].endswith("\nAllow: /")  # what the cut leaves of the last line
    with serve({"/robots.txt": PlainTextResponse(robots)}) as server:
        client = web(server)
        assert not await client.allowed(f"{server.url}/secret")


# -- contacts -----------------------------------------------------------------------------

def _flood(unique: int, repeats: int) -> str:
    return " ".join(f"person{i}@team{i}.example" for i in range(unique)) + " x@y.zz" * repeats


async def test_a_page_of_addresses_gives_at_most_50_contacts_without_stalling_the_loop(pool):
    # 2,000 distinct addresses, then 1.75 MB of one address again and again: scanned on the
    # event loop, that held it for seconds and made 2,001 contacts and draft jobs
    flood = _flood(2000, 250_000)
    with reachable(serve({"/": PlainTextResponse(flood)})) as server:
        cid = await campaign(pool, server.url + "/")
        async with loop_lateness() as late:
            result = await run(pool, stages=[s for s in STAGES if s.type != "draft"],
                               fetch_max_bytes=3 * MB, fetch_timeout_seconds=10)
    assert result.error is None and result.jobs_failed == 0
    contacts = await pool.fetch("SELECT value FROM contacts WHERE campaign_id = $1 ORDER BY value", cid)
    assert len(contacts) == MAX_CONTACTS_PER_PAGE == 50
    assert {c["value"] for c in contacts} == {f"person{i}@team{i}.example" for i in range(50)}  # the first ones
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'draft'") == 50
    assert late[0] < LATE_WITHIN, f"the event loop ran {late[0]:.2f}s late"


@pytest.mark.parametrize("text", [
    "a@" + "b." * MB,                         # one regex search over it all held the GIL 0.4 s
    "@" * (2 * MB),
    "a@b" * 600_000,
    " x@y.zz" * 280_000,
    ("q@" + ".".join(["c" * 30] * 60_000))[:2 * MB],
], ids=["dotted-domain", "ats", "at-b", "same-address", "long-domain"])
async def test_looking_for_addresses_costs_little_whatever_the_page(text):
    async with loop_lateness() as late:
        started = time.monotonic()
        found = await asyncio.get_running_loop().run_in_executor(
            None, lambda: read_contacts(text, "text/plain", 4 * MB, deadline=time.monotonic() + 5))
        took = time.monotonic() - started
    assert len(found) <= 1
    assert took < 1.0 and late[0] < LATE_WITHIN, f"{took:.2f}s, the loop {late[0]:.2f}s late"


def test_addresses_are_found_as_the_whole_page_regex_found_them():
    rnd = random.Random(7)
    for _ in range(20_000):
        text = "".join(rnd.choice("ab.@-_%+é1 Z,") for _ in range(rnd.randint(1, 40)))
        assert list(addresses(text)) == [m.group(1) for m in EMAIL.finditer(text)], text
    # but a local part over 64 characters or a domain over 255 is no address (RFC 5321)
    assert list(addresses("a" * 64 + "@x.test " + "a" * 65 + "@y.test")) == ["a" * 64 + "@x.test"]
    assert list(addresses("a@" + "b" * 252 + ".cc a@" + "b" * 253 + ".cc")) == ["a@" + "b" * 252 + ".cc"]


async def test_a_link_of_megabytes_is_refused_before_it_is_resolved():
    # a 1.9 MB '../../..' link was resolved against its page on the event loop (about a
    # second) before its length was looked at
    href = "../" * (19 * MB // 30)
    async with loop_lateness() as late:
        with pytest.raises(BadUrl, match="longer than"):
            normalize_url(href, base="http://site.test/a/b/")
        await asyncio.sleep(0.02)
    assert late[0] < LATE_WITHIN / 5, f"the event loop ran {late[0]:.2f}s late"


# -- charsets -----------------------------------------------------------------------------

async def test_bytes_a_declared_charset_does_not_define_do_not_stall_the_loop():
    # windows-1253 leaves 0xAA undefined: each one replaced costs a microsecond, and the
    # whole 1.9 MB decoded in one call held the event loop for 1.7-2.5 s
    body = b"<p>" + b"\xaa" * (19 * MB // 10) + b"</p>"
    with serve({"/p": Response(body, media_type="text/html; charset=windows-1253")}) as server:
        async with loop_lateness() as late:
            resp = await web(server).get(server.url + "/p")
    assert resp.outcome == "ok" and resp.text.count("\ufffd") == 19 * MB // 10
    assert late[0] < LATE_WITHIN, f"the event loop ran {late[0]:.2f}s late"


async def test_a_punycode_page_reads_as_utf8_in_linear_time():
    body = "-" + "ba" * 50_000  # Python's punycode decoder is quadratic: seconds on the loop
    with serve({"/p": Response(body, media_type="text/html; charset=punycode")}) as server:
        async with loop_lateness() as late:
            resp = await web(server).get(server.url + "/p")
    assert (resp.outcome, resp.text) == ("ok", body)
    assert late[0] < LATE_WITHIN, f"the event loop ran {late[0]:.2f}s late"


STRANGE = b"<title>t</title><p>\\ud800 +2AA- caf\xe9 \x00 end</p>"


@pytest.mark.parametrize("charset, expected", [
    ("idna", None), ("undefined", None),           # their decoders raise
    ("unicode_escape", None), ("utf-7", None),     # theirs make lone surrogates
    ("latin-1", "café"), ("ISO-8859-15", "café"), ("windows-1252", "café"),
])
async def test_any_declared_charset_gives_text_postgresql_can_store(charset, expected):
    with serve({"/p": Response(STRANGE, media_type=f"text/html; charset={charset}")}) as server:
        resp = await web(server).get(server.url + "/p")
    assert resp.outcome == "ok"
    resp.text.encode("utf-8")  # no lone surrogate
    assert "\x00" not in resp.text and resp.text.endswith(" end</p>")
    assert (expected or "caf\ufffd") in resp.text  # not a text charset: read as UTF-8


async def test_a_real_text_charset_is_used():
    with serve({"/p": Response("<p>日本語のページ</p>".encode("shift_jis"),
                               media_type="text/html; charset=Shift_JIS")}) as server:
        resp = await web(server).get(server.url + "/p")
    assert resp.text == "<p>日本語のページ</p>"


# -- links and redirects httpx or PostgreSQL refuse ------------------------------------------

def _page(body: str) -> Response:
    return Response(f"<html><title>t</title>{body}</html>", media_type="text/html")


LONG = "/long/" + "x" * 6000


async def test_links_and_redirects_that_cannot_be_requested_or_stored_end_in_an_outcome(pool):
    routes = {
        "/": _page('<a href="/c/a\x01b">1</a><a href="/c/a\x7fb">2</a><a href="/redir-data">3</a>'
                   '<a href="/redir-bs">4</a><a href="/longlink">6</a>'
                   '<a href="/cs/idna">7</a><a href="/cs/utf-7">8</a>'),
        "/redir-data": Response(status_code=302, headers={"Location": "data:text/html,<a href=x>"}),
        "/redir-bs": Response(status_code=302, headers={"Location": "http:\\\\127.0.0.1\\x"}),
        "/longlink": _page(f'<a href="{LONG}">long</a><a href="/ok">ok</a>'),
        "/cs/idna": Response(STRANGE, media_type="text/html; charset=idna"),
        "/cs/utf-7": Response(STRANGE, media_type="text/html; charset=utf-7"),
        "/ok": _page("fine"),
    }
    with reachable(serve(routes)) as server:
        cid = await campaign(pool, server.url + "/")
        result = await run(pool, fetch_max_bytes=64_000)  # the long link's page is 6 KB
    assert result.error is None and result.jobs_failed == 0
    failed = await pool.fetch("SELECT type, last_error FROM jobs WHERE last_error IS NOT NULL")
    assert failed == []
    got = {url.removeprefix(server.url): page for url, page in (await pages(pool, cid)).items()}
    # the links with control characters and the 6 KB one were skipped; the page's other link was not
    assert set(got) == {"/", "/redir-data", "/redir-bs", "/longlink", "/cs/idna", "/cs/utf-7", "/ok"}
    assert all(len(url.encode()) <= MAX_URL_BYTES for url in got)
    for path in ("/redir-data", "/redir-bs"):
        page = got[path]
        assert (page["state"], page["status_code"]) == ("fetched", 302), path
        assert page["note"].startswith("redirect to an unusable location"), (path, page["note"])
    for path in ("/cs/idna", "/cs/utf-7", "/longlink", "/ok"):
        assert got[path]["state"] == "fetched", path
    assert "caf\ufffd" in got["/cs/utf-7"]["body"]
