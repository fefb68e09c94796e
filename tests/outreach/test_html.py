"""Reading pages: what the stages get out of a page, and hostile pages served by a real
local site, crawled by the real pipeline while the app on the same event loop keeps
answering /health/live."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from app.api.main import create_app
from app.engine.db import create_pool
from app.outreach.html import PARSE_WORKERS, PageNotParsed, parse_html, parse_page, parse_plain
from tests.outreach.conftest import campaign, pages, reachable, run, settings
from tests.outreach.servers import ServerThread

PAGE = """<!doctype html><html lang=" en-GB "><head>
<title> Acme &amp;
  Trail </title>
<meta name="description" content="  Gear for   long walks. ">
<meta property="og:description" content="not this one: the first description wins">
<meta name="keywords" content="tents, stoves,, maps ">
<base href=" /shop/ ">
<script>var s = "<a href='/in-script'>not a link</a>";</script>
<style>p::before { content: "<a href='/in-style'>" }</style>
</head><body>
<h1>Hello</h1><p>world<b>wide</b></p><div>one</div>two<br>three&nbsp;four
<noscript>enable javascript</noscript><template><a href="/in-template">t</a>hidden</template>
<svg><title>an icon</title><text>svg text</text></svg>
<ul><li><a href="/a">A</a></li><li><a href=' /b?x=1&amp;y=2 ' href="/ignored">B</a></li></ul>
<map><area href="mailto:ops@acme.test"></map><a>no href</a><a href="">empty</a>
<!-- <a href="/in-comment"> -->
</body></html>"""


# -- what a page says -------------------------------------------------------------------

def test_a_page_reads_as_before():
    page = parse_html(PAGE)
    assert page.title == "Acme & Trail"
    assert page.description == "Gear for long walks."
    assert page.keywords == ["tents", "stoves", "maps"]
    assert page.language == "en-GB"
    assert page.base == "/shop/"
    assert not page.nofollow
    # a/area hrefs in page order, entities decoded, the first of a repeated attribute;
    # nothing from scripts, styles or comments (a template's links count, as they did)
    assert page.links == ["/in-template", "/a", "/b?x=1&y=2", "mailto:ops@acme.test"]
    # block tags separate words, inline ones do not; skipped elements say nothing
    assert page.text == "Hello worldwide one two three four A B no hrefempty"


def test_language_description_and_robots_from_meta():
    page = parse_html('<meta http-equiv="Content-Language" content="fr">'
                      '<meta property="og:description" content="From OG">'
                      '<meta name="ROBOTS" content="noindex, NoFollow">')
    assert (page.language, page.description, page.nofollow) == ("fr", "From OG", True)
    assert parse_html('<html lang="de"><meta http-equiv="content-language" content="fr">').language == "de"


def test_broken_markup_reads_as_browsers_read_it():
    # an unclosed comment, tag or script runs to the end of the page
    assert parse_html('<a href="/x">x</a><!-- <a href="/y">').links == ["/x"]
    assert parse_html('<a href="/x">x</a><a href="/y').links == ["/x"]
    assert parse_html('<p>seen<script>if (a <b) { x = "</p>" }').text == "seen"
    # a `<` that starts no tag is text; a quote opens a value only after `=`
    assert parse_html("<p>1 < 2 <3 and <= 4</p>").text == "1 < 2 <3 and <= 4"
    assert parse_html('<a title=don"t href=/ok>x</a>').links == ["/ok"]
    # NUL is dropped (PostgreSQL text cannot hold it)
    page = parse_html("<title>A\x00B</title>C\x00D")
    assert (page.title, page.text) == ("AB", "CD")


def test_plain_text_is_only_text():
    assert parse_plain("  a\x00b \n c ").text == "ab c"


async def test_parse_page_reads_html_and_text_off_the_loop():
    assert (await parse_page("<title>T</title><a href=/x>x</a>", is_html=True)).links == ["/x"]
    assert (await parse_page("<title>T</title>", is_html=False)).text == "<title>T</title>"


async def test_parse_page_reads_no_further_than_its_cap():
    page = await parse_page('<a href="/first">x</a>' + " " * 1000 + '<a href="/after">y</a>',
                            is_html=True, max_chars=1000)
    assert page.links == ["/first"]


def test_a_parse_past_its_deadline_stops():
    with pytest.raises(PageNotParsed):
        parse_html("<p>x" * 100_000, deadline=time.monotonic() - 1)


async def test_a_page_past_its_timeout_is_not_parsed_and_stops_costing_cpu():
    slow = "<p>x" * 1_000_000  # 4 MB of tags: seconds of work
    outcomes = await asyncio.gather(*(parse_page(slow, is_html=True, timeout=0.01, max_chars=4_000_000)
                                      for _ in range(PARSE_WORKERS)), return_exceptions=True)
    assert [str(o) for o in outcomes] == ["the page could not be read within 0.01s"] * PARSE_WORKERS
    # every worker had one of those pages; each stopped at the deadline, so a worker is free now
    assert (await parse_page("<title>next</title>", is_html=True, timeout=0.5)).title == "next"


# -- hostile pages through the real pipeline ----------------------------------------------

MB = 1_000_000
HOSTILE = {
    # the stdlib parser rescans the rest of the page from every unclosed comment
    "comments": "<title>Comments</title>" + "<!--" * (2 * MB // 4),
    # tree builders scan their stack of open elements, here 400k deep, for each tag
    "nested": "<title>Nested</title>" + "<div>" * (2 * MB // 5),
    # 1e5 attributes on one link, its href last
    "attributes": "<title>Attributes</title><a" + "".join(f" a{i}=1" for i in range(100_000))
                  + ' href="/attributes/next">next</a>',
}
HEALTH_EVERY = 0.05
# A parse on the event loop stalls it for seconds; a loaded 2-core box, for tens of ms.
HEALTH_WITHIN = 0.5
# A parse that is quadratic in these pages takes minutes; a linear one about 2 s alone and
# past 5 s on a loaded 2-core box (a fresh clone's make test): the bound sits between.
HANDLED_WITHIN = 15.0
STALLED_AFTER = 30.0


def hostile_app() -> Starlette:
    async def home(request):
        shape = request.path_params["shape"]
        return HTMLResponse(f'<title>{shape}</title><a href="/{shape}/page">the page</a>')

    async def page(request):
        return HTMLResponse(HOSTILE[request.path_params["shape"]])

    async def not_found(request, exc):
        return PlainTextResponse("not found", status_code=404)

    return Starlette(routes=[Route("/{shape}/", home), Route("/{shape}/page", page)],
                     exception_handlers={404: not_found})


@pytest.fixture(scope="module")
def hostile_site():
    with reachable(ServerThread(hostile_app())) as server:
        yield server.url


async def _crawl_while_polling_health(dsn: str, url: str):
    """The pipeline crawls `url` while /health/live of the app is asked every 50 ms, both
    on this one event loop. Returns the run's seconds and each answer's lateness."""
    pool = await create_pool(dsn, size=5)
    app = create_app(settings())
    late: list[float] = []
    try:
        cid = await campaign(pool, url)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app.test") as client:
            done = asyncio.Event()

            async def poll():
                due = time.monotonic()
                while not done.is_set():
                    resp = await client.get("/health/live")
                    assert resp.status_code == 200
                    late.append(time.monotonic() - due)  # since it was due: a stalled loop shows
                    due = time.monotonic() + HEALTH_EVERY
                    await asyncio.sleep(HEALTH_EVERY)

            poller = asyncio.create_task(poll())
            started = time.monotonic()
            result = await run(pool, fetch_max_bytes=4 * MB, fetch_timeout_seconds=10)
            took = time.monotonic() - started
            done.set()
            await poller
        return result, took, late, await pages(pool, cid)
    finally:
        await pool.close()


def _on_a_loop_of_its_own(coro):
    """Run `coro` on an event loop in a thread of its own: a loop blocked by a parse
    fails the test after STALLED_AFTER seconds instead of hanging the session."""
    out: dict = {}

    def main():
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    worker = threading.Thread(target=main, daemon=True)
    worker.start()
    worker.join(STALLED_AFTER)
    if worker.is_alive():
        return None
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("shape", list(HOSTILE))
async def test_a_hostile_page_is_read_in_time_and_the_loop_keeps_answering(pool, dsn, hostile_site, shape):
    url = f"{hostile_site}/{shape}/"
    outcome = await asyncio.to_thread(_on_a_loop_of_its_own, _crawl_while_polling_health(dsn, url))
    if outcome is None:
        # free the locks of the transaction the stalled loop left open, for the tests after
        await pool.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND state LIKE 'idle in transaction%'")
        pytest.fail(f"the event loop stalled: the pipeline had not finished after {STALLED_AFTER:g}s")
    result, took, late, got = outcome
    assert result.error is None and result.stop_reason == "no_work"
    hostile = got[f"{hostile_site}/{shape}/page"]
    assert hostile["state"] == "fetched" and hostile["title"] == shape.capitalize()
    assert result.summary["stages"]["crawl"]["done"] == 2 + (shape == "attributes")
    if shape == "attributes":  # the href after 1e5 attributes was read and followed
        assert got[f"{hostile_site}/attributes/next"]["status_code"] == 404
    assert took < HANDLED_WITHIN, f"the run took {took:.2f}s"
    assert len(late) >= took / (HEALTH_EVERY + HEALTH_WITHIN)
    assert max(late) < HEALTH_WITHIN, f"/health/live answered {max(late) * 1000:.0f} ms late"
