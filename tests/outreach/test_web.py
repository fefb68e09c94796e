"""The web client's rules, URL normal forms, Retry-After, robots.txt as RFC 9309 reads
it, and what counts as a contact."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.outreach.extract import email_contact, find_contacts, profile_contact
from app.outreach.urls import BadUrl, normalize_url, same_site
from app.outreach.web import FetchError, RateLimited, WebClient
from app.retry_after import retry_after
from tests.outreach.servers import ServerThread


def test_one_spelling_per_page():
    assert normalize_url("HTTP://Example.COM:80/a?b=1#top") == "http://example.com/a?b=1"
    assert normalize_url("https://example.com") == "https://example.com/"
    assert normalize_url("../c.html", base="https://example.com/a/b/") == "https://example.com/a/c.html"
    assert normalize_url("https://example.com:8443/") == "https://example.com:8443/"
    for bad in ("mailto:a@b.c", "javascript:void(0)", "ftp://example.com", "", "https://", "http://x:99999/",
                "https://example.com:0/"):  # port 0 would count as the site's default port
        with pytest.raises(BadUrl):
            normalize_url(bad)


def test_what_counts_as_the_same_site():
    assert same_site("http://example.com/a", "https://www.example.com/b")
    assert not same_site("http://example.com/", "http://example.org/")
    assert not same_site("http://127.0.0.1:8000/", "http://127.0.0.1:8001/")
    assert not same_site("http://shop.example.com/", "http://example.com/")


def test_retry_after_in_seconds_or_as_a_date_capped_at_a_day():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry_after("120", now) == timedelta(seconds=120)
    assert retry_after(format_datetime(now + timedelta(minutes=5), usegmt=True), now) == timedelta(minutes=5)
    assert retry_after("999999", now) == timedelta(days=1)
    assert retry_after("9" * 20, now) == timedelta(days=1)  # no overflow past a timedelta's range
    assert retry_after("9" * 5000, now) == timedelta(days=1)  # nor int()'s limit on digits
    assert retry_after("\u00b2", now) is None  # a digit to str.isdigit, not a number
    assert retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now) == timedelta(days=1)
    assert retry_after("0", now) == timedelta(seconds=1)
    assert retry_after("soon", now) is None and retry_after(None, now) is None


def robots_site(status: int, seen: list):
    async def robots(request):
        seen.append(request.headers.get("user-agent"))
        headers = {"Retry-After": "60"} if status == 503 else None
        return PlainTextResponse("User-agent: SkiplockBot\nDisallow: /no/\n", status_code=status, headers=headers)
    return Starlette(routes=[Route("/robots.txt", robots)])


def client(server: ServerThread | None = None, agent: str = "SkiplockBot/0.1 (test)",
           timeout: float = 2) -> WebClient:
    """A client that may reach `server` (the egress guard refuses loopback otherwise)."""
    allow = f"127.0.0.1:{server.port}" if server else ""
    return WebClient(user_agent=agent, timeout=timeout, max_bytes=4096, allow_private=allow)


async def test_robots_rules_for_our_agent_read_once():
    seen = []
    with ServerThread(robots_site(200, seen)) as server:
        web = client(server)
        assert not await web.allowed(f"{server.url}/no/page")
        assert await web.allowed(f"{server.url}/yes")
    assert seen == ["SkiplockBot/0.1 (test)"]  # once, with a user agent that says who we are


@pytest.mark.parametrize("status, outcome", [(404, "allowed"), (403, "allowed"), (500, FetchError),
                                             (503, RateLimited)])
async def test_robots_txt_answers_per_rfc_9309(status, outcome):
    with ServerThread(robots_site(status, [])) as server:
        web = client(server)
        if outcome == "allowed":  # a 4xx means there are no rules
            assert await web.allowed(f"{server.url}/no/page")
        else:  # unreachable: not "allowed", but tried again later
            with pytest.raises(outcome):
                await web.allowed(f"{server.url}/no/page")


# RFC 9309's own examples (5.1, 5.2), its rule for equal matches (2.2.2), and the two
# the stdlib's parser got wrong: `*` with a `$` anchor, and a longer Allow after a
# shorter Disallow (it took the first match).
RFC_EXAMPLE = """User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""
LONGEST_MATCH = """User-Agent : foobot
Allow : /example/page/
Disallow : /example/page/disallowed.gif
"""
OURS = """User-agent: SkiplockBot
Disallow: /*.pdf$
Disallow: /shop
Allow: /shop/public
Allow: /folder
Disallow: /folder
"""
US = "SkiplockBot/0.1 (test)"


@pytest.fixture(scope="module")
def robots_server():
    """Serves whatever rules the test put in `.rules` (each test's client reads them anew)."""
    async def robots(request):
        return PlainTextResponse(server.rules)
    with ServerThread(Starlette(routes=[Route("/robots.txt", robots)])) as server:
        yield server


@pytest.mark.parametrize("rules, agent, path, allowed", [
    (RFC_EXAMPLE, "foobot/2.1", "/example/page.html", True),
    (RFC_EXAMPLE, "foobot/2.1", "/example/allowed.gif", True),
    (RFC_EXAMPLE, "foobot/2.1", "/example/other.html", False),
    (RFC_EXAMPLE, "foobot/2.1", "/publications/", False),   # its own group only, not *'s
    (RFC_EXAMPLE, "BarBot", "/example/page.html", False),   # names match case-insensitively
    (RFC_EXAMPLE, "bazbot", "/example/page.html", False),   # one group, two agents
    (RFC_EXAMPLE, "bazbot", "/example/", True),
    (RFC_EXAMPLE, "quxbot", "/example/page.html", True),    # an empty group allows all
    (RFC_EXAMPLE, US, "/pictures/a.gif", False),            # `*` and `$`
    (RFC_EXAMPLE, US, "/pictures/a.gifv", True),
    (RFC_EXAMPLE, US, "/example/x", False),
    (RFC_EXAMPLE, US, "/publications/x", True),
    (LONGEST_MATCH, "foobot", "/example/page/", True),
    (LONGEST_MATCH, "foobot", "/example/page/disallowed.gif", False),  # the longer rule wins
    (LONGEST_MATCH, "foobot", "/example/page/other.gif", True),
    (OURS, US, "/a/file.pdf", False),
    (OURS, US, "/a/file.pdf.html", True),
    (OURS, US, "/shop/cart", False),
    (OURS, US, "/shop/public/hats", True),  # a longer Allow beats a shorter Disallow
    (OURS, US, "/folder/page", True),       # equal length: the Allow
])
async def test_robots_txt_is_matched_as_rfc_9309_says(robots_server, rules, agent, path, allowed):
    robots_server.rules = rules
    assert await client(robots_server, agent).allowed(f"{robots_server.url}{path}") is allowed


async def test_a_connection_refused_is_a_fetch_error():
    with ServerThread(Starlette()) as server:
        url = server.url
    with pytest.raises(FetchError):  # the server is gone now
        await client(server).get(url + "/")


async def test_a_closed_port_and_a_silent_server_read_the_same_in_last_error():
    """A job's last_error must not work as a port scanner: refused and timed out read the
    same, with no errno text."""
    async def silent(request):
        await asyncio.sleep(5)
    errors = []
    with ServerThread(Starlette(routes=[Route("/", silent)])) as open_port:
        with ServerThread(Starlette()) as closed_port:
            pass
        for server in (closed_port, open_port):
            with pytest.raises(FetchError) as caught:
                await client(server, timeout=0.5).get(server.url + "/")
            errors.append(str(caught.value).replace(server.url, "URL"))
    assert errors == ["no answer from URL/: could not connect, or timed out after 0.5s"] * 2


async def test_a_refused_fetch_is_its_own_outcome_and_says_nothing_more():
    web = client()
    for url in ("http://127.0.0.1:9/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:80/"):
        resp = await web.get(url)
        assert (resp.outcome, resp.note, resp.status, resp.text) == ("blocked", "blocked", None, None)


async def test_contacts_are_people_not_pages_of_the_social_sites():
    assert profile_contact("https://m.youtube.com/@Someone/").value == "https://www.youtube.com/@someone"
    assert profile_contact("https://www.youtube.com/channel/UCabcDEF1234567890").value.endswith("UCabcDEF1234567890")
    for not_a_person in ("https://youtube.com/watch?v=x", "https://x.com/intent/tweet", "https://x.com/share",
                         "https://www.instagram.com/p/abc/", "https://www.facebook.com/sharer.php",
                         "https://twitter.com/home", "https://example.com/@someone"):
        assert profile_contact(not_a_person) is None, not_a_person
    assert email_contact("Sam@Example.COM").value == "sam@example.com"
    assert email_contact("logo@2x.png") is None
    found = await find_contacts('<a href="mailto:a@x.test,b@x.test?cc=c@x.test">mail</a> a@x.test', "text/html")
    assert [c.value for c in found] == ["a@x.test", "b@x.test"]
    assert [c.value for c in await find_contacts("write to ops@x.test.", "text/plain")] == ["ops@x.test"]
