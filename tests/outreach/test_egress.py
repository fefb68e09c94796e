"""The egress guard, attacked: a tenant's campaign URL, a crawl payload, the links and
redirects of a hostile site and a webhook URL all try to reach an internal service on
127.0.0.1 (and the cloud metadata address, and a private network). The internal service
must get no request at all, and its secret must appear nowhere in the database."""

from __future__ import annotations

import ipaddress
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpcore
import pytest
import trustme
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from app.egress import (EgressRefused, GuardedBackend, checked_addresses, embedded_ipv4, is_public,
                        literal_ip, literal_refusal, parse_allow_list)
from app.engine import jobs as q
from app.engine.jobs import NewJob
from app.outreach.campaigns import start_campaign
from app.outreach.web import FetchError, WebClient
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from tests.outreach import factories as f
from tests.credentials import WEBHOOK_SECRET
from tests.outreach.conftest import reachable, run, settings
from tests.outreach.servers import Recorder, ServerThread
from tests.receiver import Receiver

SECRET = "TOP-SECRET-7f3a9c"
INSIDER = "root@internal.test"


# Which addresses: every spelling and every range ------------------------------------

@pytest.mark.parametrize("spelling", [
    "127.0.0.1", "127.1", "0x7f.1", "0x7F.0.0.1", "0177.0.0.1", "017700000001", "2130706433",
    "0x7f000001", "127.0.0.0x1", "127.0.0.1.", "[::ffff:127.0.0.1]", "::ffff:7f00:1",
])
def test_every_spelling_of_loopback_is_read_as_127_0_0_1(spelling):
    ip = literal_ip(spelling)
    assert ip is not None and (embedded_ipv4(ip) or ip) == ipaddress.ip_address("127.0.0.1")
    assert not is_public(ip)


@pytest.mark.parametrize("name", ["example.com", "1.2.3.4.5", "256.1.1.1", "0x100.1", "08.1.1.1", "1e1", ""])
def test_names_and_impossible_numbers_are_not_literals(name):
    assert literal_ip(name) is None


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3",                  # loopback, "this network"
    "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",             # RFC 1918
    "100.64.0.1", "100.127.255.254",                                       # carrier-grade NAT
    "169.254.169.254", "169.254.0.1",                                      # link-local, cloud metadata
    "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",        # multicast, reserved
    "192.0.0.1", "192.0.2.1", "198.51.100.1", "203.0.113.1", "198.18.0.1", # IETF, documentation, benchmark
    "::1", "::", "fe80::1", "fe80::1%1", "fec0::1",                        # loopback, unspecified, link/site-local
    "fc00::1", "fd12:3456::1", "ff02::1", "ff0e::1", "2001:db8::1",        # ULA, multicast, documentation
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",       # IPv4-mapped
    "::127.0.0.1", "::10.0.0.1",                                           # IPv4-compatible
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",               # NAT64
    "2002:7f00:1::", "2002:a00:1::1",                                      # 6to4 of private v4
    "2001::1", "2001:0:4136:e378::1",                                      # Teredo
])
def test_non_public_addresses(address):
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700:4700::1111",
                                     "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"])
def test_public_addresses(address):
    assert is_public(ipaddress.ip_address(address))


def test_the_allow_list_is_exact_host_and_port():
    allow = parse_allow_list(" 127.0.0.1:8000, [::1]:9000 ,LocalHost:81,")
    assert allow == {("127.0.0.1", 8000), ("::1", 9000), ("localhost", 81)}
    assert literal_refusal("http://127.0.0.1:8000/x", allow) is None
    for other in ("http://127.0.0.1:8001/", "http://127.1:8000/", "http://localhost:8000/", "http://[::1]:9001/"):
        assert literal_refusal(other, allow), other
    with pytest.raises(ValueError):
        parse_allow_list("127.0.0.1")


async def test_a_name_is_looked_up_once_and_every_answer_must_be_public():
    asked = []

    def resolver(answers):
        async def resolve(host, port):
            asked.append(host)
            return answers
        return resolve

    assert await checked_addresses("shop.test", 443, resolver=resolver(["93.184.216.34"])) == [
        ipaddress.ip_address("93.184.216.34")]
    for answers in (["93.184.216.34", "10.0.0.1"], ["::1"], ["93.184.216.34", "fe80::1%2"], ["not-an-ip"]):
        with pytest.raises(EgressRefused):
            await checked_addresses("shop.test", 443, resolver=resolver(answers))
    assert asked == ["shop.test"] * 5
    # a private answer is fine only for the exact host:port listed
    allow = parse_allow_list("shop.test:8080")
    assert await checked_addresses("shop.test", 8080, allow, resolver(["10.0.0.1"]))
    with pytest.raises(EgressRefused):
        await checked_addresses("shop.test", 8081, allow, resolver(["10.0.0.1"]))
    # literals and local names are judged without a lookup
    asked.clear()
    for host in ("127.1", "169.254.169.254", "::1", "localhost", "api.localhost"):
        with pytest.raises(EgressRefused):
            await checked_addresses(host, 80, resolver=resolver(["93.184.216.34"]))
    assert asked == []


class Sockets(httpcore.AnyIOBackend):
    """The real network layer, noting every address a connection is opened to; `fake`
    answers an address with a failure instead (no packet leaves for the internet)."""

    def __init__(self, fake: set[str] = frozenset()) -> None:
        self.opened: list[tuple[str, int]] = []
        self.fake = fake

    async def connect_tcp(self, host, port, **kw):
        self.opened.append((host, port))
        if host in self.fake:
            raise httpcore.ConnectError("not really")
        return await super().connect_tcp(host, port, **kw)


@pytest.mark.parametrize("host", ["169.254.169.254", "10.0.0.1", "0xa9.0xfe.0xa9.0xfe", "[fd00::1]", "localhost"])
async def test_a_refusal_happens_before_any_connection_is_opened(host):
    sockets = Sockets()
    with pytest.raises(EgressRefused):
        await GuardedBackend(inner=sockets).connect_tcp(host.strip("[]"), 80, timeout=5)
    assert sockets.opened == []


async def test_dns_rebinding_connects_to_the_address_that_was_checked():
    """The first answer is public and passes; every later one is loopback. The guard asks
    once and connects to what it checked; a second lookup would have reached loopback."""
    answers = iter([["93.184.216.34"]])
    calls = []

    async def rebinding(host, port):
        calls.append(host)
        return next(answers, ["127.0.0.1"])

    sockets = Sockets(fake={"93.184.216.34"})
    with pytest.raises(httpcore.ConnectError):
        await GuardedBackend(resolver=rebinding, inner=sockets).connect_tcp("rebind.test", 8080, timeout=5)
    assert calls == ["rebind.test"] and sockets.opened == [("93.184.216.34", 8080)]


class EchoServer:
    """HTTP on a loopback address of our choosing; answers with its name and the Host
    header it got, and notes each path."""

    def __init__(self, name: str, host: str, port: int = 0) -> None:
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                owner.paths.append(self.path)
                body = f"{name} answered Host {self.headers['host']}".encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> "EchoServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_dns_rebinding_through_the_client_reaches_the_checked_server_only():
    """Two servers on one port, 127.0.0.1 and 127.0.0.2; the name is allowed (so both
    answers pass) and resolves to the first, then to the second. The page comes from the
    first, with the name in its Host header, and the second hears nothing."""
    with EchoServer("checked", "127.0.0.1") as checked, EchoServer("other", "127.0.0.2", checked.port) as other:
        answers = iter([["127.0.0.1"]])

        async def rebinding(host, port):
            return next(answers, ["127.0.0.2"])

        web = WebClient(user_agent="SkiplockBot/0.1 (test)", timeout=5, max_bytes=4096,
                        allow_private=f"rebind.test:{checked.port}", resolver=rebinding)
        resp = await web.get(f"http://rebind.test:{checked.port}/page")
    assert resp.outcome == "ok" and resp.text == f"checked answered Host rebind.test:{checked.port}"
    assert checked.paths == ["/page"] and other.paths == []


class TlsServer:
    """HTTPS on 127.0.0.1 with a certificate for shop.test only; notes the SNI name and
    the Host header of each request."""

    def __init__(self, ca: trustme.CA) -> None:
        self.names: list[str | None] = []
        self.hosts: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                owner.hosts.append(self.headers["host"])
                body = b"<title>over TLS</title>"
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("shop.test").configure_cert(context)
        context.sni_callback = lambda sock, name, ctx: self.names.append(name)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]

    def __enter__(self) -> "TlsServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_tls_still_names_and_verifies_the_host_though_the_socket_goes_to_an_address():
    ca = trustme.CA()
    trust = ssl.create_default_context()
    ca.configure_trust(trust)

    async def to_loopback(host, port):
        return ["127.0.0.1"]

    with TlsServer(ca) as server:
        allow = f"shop.test:{server.port},elsewhere.test:{server.port}"
        web = WebClient(user_agent="SkiplockBot/0.1 (test)", timeout=5, max_bytes=4096,
                        allow_private=allow, resolver=to_loopback, verify=trust)
        resp = await web.get(f"https://shop.test:{server.port}/")
        assert resp.outcome == "ok" and resp.text == "<title>over TLS</title>"
        assert server.names[-1] == "shop.test" and server.hosts == [f"shop.test:{server.port}"]
        # the same address under a name the certificate does not carry: verification fails
        with pytest.raises(FetchError):
            await web.get(f"https://elsewhere.test:{server.port}/")
        assert server.names[-1] == "elsewhere.test" and len(server.hosts) == 1


# The attack, through the real pipeline -------------------------------------------------

def internal_app(rec: Recorder) -> Starlette:
    """The service nobody outside may reach: everything it says is secret."""
    async def anything(request: Request):
        rec.hits.append(request.url.path)
        return HTMLResponse(f"<title>{SECRET}</title><p>admin: {INSIDER} key {SECRET}</p>"
                            f'<a href="/more-{SECRET}">more</a>')
    return Starlette(routes=[Route("/{path:path}", anything)])


def spellings(port: int) -> list[str]:
    """The internal service's address as a URL, every way it can be written."""
    return [f"http://{host}:{port}/" for host in (
        "127.0.0.1", "localhost", "127.1", "0x7f.1", "2130706433", "[::1]", "[::ffff:127.0.0.1]")] + [
        "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"]


def hostile_app(targets: list[str]) -> Starlette:
    """An allowed site whose robots.txt, links and redirects all lead to the internal service."""
    async def home(request):
        links = "".join(f'<a href="{t}">x</a><a href="/go/{i}">go</a>' for i, t in enumerate(targets))
        return HTMLResponse(f"<title>Hostile</title>{links}")

    async def go(request):
        return RedirectResponse(targets[int(request.path_params["i"])], status_code=302)

    async def robots(request):
        return RedirectResponse(targets[0] + "robots.txt", status_code=302)

    return Starlette(routes=[Route("/", home), Route("/go/{i:int}", go), Route("/robots.txt", robots)])


async def stored_campaign(pool, owner, url: str):
    """A campaign on `url` as the database may hold it (added before the API refused such
    URLs, or on a name that resolves to a private address), with its brief and crawl queued."""
    cid = await f.as_system(pool, "INSERT INTO campaigns (user_id, name, url) VALUES ($1, $2, $3) RETURNING id",
                            owner, url, url)
    await start_campaign(pool, cid, url)
    return cid


async def secrets_stored(pool) -> int:
    return await pool.fetchval(
        "SELECT (SELECT count(*) FROM pages t WHERE t::text ~ $1) + (SELECT count(*) FROM contacts t WHERE t::text ~ $1)"
        " + (SELECT count(*) FROM drafts t WHERE t::text ~ $1) + (SELECT count(*) FROM briefs t WHERE t::text ~ $1)"
        " + (SELECT count(*) FROM jobs t WHERE t::text ~ $1) + (SELECT count(*) FROM runs t WHERE t::text ~ $1)",
        f"{SECRET}|{INSIDER}")


async def test_nothing_a_tenant_names_reaches_the_internal_service(pool):
    rec = Recorder()
    with ServerThread(internal_app(rec)) as internal:
        targets = spellings(internal.port)
        with reachable(ServerThread(hostile_app(targets))) as hostile:
            owner = await f.user(pool, "pro")
            hostile_id = await stored_campaign(pool, owner, hostile.url + "/")
            direct = {url: await stored_campaign(pool, owner, url) for url in targets}
            for url, cid in direct.items():  # and a crawl job naming a page there directly
                await q.enqueue(pool, NewJob(type="crawl", lane=cid, payload={"url": url + "secret"}))
            result = await run(pool)
            await run(pool)  # anything deferred or retried would show here
    assert rec.hits == []  # not one request, not even robots.txt
    assert await secrets_stored(pool) == 0
    assert result.error is None

    briefs = {r["url"]: r for r in await pool.fetch("SELECT * FROM briefs")}
    pages = {(r["campaign_id"], r["url"]): r for r in await pool.fetch("SELECT * FROM pages")}
    for url, cid in direct.items():
        assert briefs[url]["status_code"] is None and briefs[url]["note"].startswith("blocked"), url
        page = pages[cid, url + "secret"]
        assert (page["state"], page["note"], page["status_code"], page["body"]) == ("blocked", "blocked", None, None)
    for i, url in enumerate(targets):  # the hostile site's redirects
        page = pages[hostile_id, f"{hostile.url}/go/{i}"]
        assert (page["state"], page["note"]) == ("blocked", "blocked"), url
    # links off the site are never discovered; a refusal is done, not retried
    assert {url for (cid, url) in pages if cid == hostile_id} == {hostile.url + "/"} | {
        f"{hostile.url}/go/{i}" for i in range(len(targets))}
    jobs = await pool.fetch("SELECT type, status, attempts, last_error FROM jobs WHERE type IN ('brief', 'crawl')")
    assert {(j["status"], j["attempts"], j["last_error"]) for j in jobs} == {("done", 1, None)}


async def test_a_webhook_to_an_internal_address_is_refused_once_and_sends_nothing(pool):
    async def broken(job, ctx):
        raise RuntimeError("no luck")

    with Receiver() as internal_hook, Receiver() as allowed_hook:
        owner = await f.user(pool, "free")
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", owner,
                          internal_hook.url.replace("127.0.0.1", "127.1"))
        elsewhere = await f.user(pool, "free")
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", elsewhere,
                          "http://169.254.169.254/latest/meta-data/")
        listed = await f.user(pool, "free")
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", listed, allowed_hook.url)
        for who in (owner, elsewhere, listed):
            await f.jobs(pool, "t", 1, lane=await f.campaign(pool, who))
        s = settings(webhook_secret=WEBHOOK_SECRET, fetch_allow_private=urlsplit(allowed_hook.url).netloc)
        pipeline = Pipeline(pool, [Stage(type="t", handler=broken, max_attempts=1)], s)
        await pipeline.run("cron")
        await pipeline.run("cron")
    assert internal_hook.received == [] and len(allowed_hook.received) == 1
    notes = await pool.fetch("SELECT status, attempts, last_error, payload FROM jobs WHERE type = 'notify'")
    by_url = {n["payload"]["url"]: n for n in notes}
    assert len(by_url) == 3 and by_url[allowed_hook.url]["status"] == "done"
    for url, note in by_url.items():
        if url != allowed_hook.url:  # failed for good at once: the same address would be refused again
            assert (note["status"], note["attempts"], note["last_error"]) == ("failed", 1, "blocked"), url
    assert json.loads(allowed_hook.received[0].body)["event"] == "job.failed"
