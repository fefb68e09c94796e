"""The crawler's HTTP client: httpx with a time limit per fetch, a size cap, redirects
followed only within the site, robots.txt honoured (RFC 9309), and a user agent that
says who it is. Every connection, redirects and robots.txt included, goes through the
egress guard (app.egress): only public addresses, or FETCH_ALLOW_PRIVATE's host:port.

What a fetch can end in, and what the stages make of it:
  Response.outcome "ok"           2xx with a text body        -> stored (and read)
                   "client_error" 4xx other than 429, a redirect to an unusable
                                  location, a URL httpx cannot request -> recorded, job done
                   "not_text"     2xx, not HTML or plain text -> recorded, job done
                   "too_large"    past FETCH_MAX_BYTES (decoded) -> recorded, job done
                   "bad_encoding" a Content-Encoding we cannot undo -> recorded, job done
                   "offsite"      redirected to another site  -> recorded, job done
                   "blocked"      a redirect led where robots.txt disallows, or (note
                                  exactly "blocked") the egress guard refused the address
                   "too_many_redirects"
  raises RateLimited (a DeferJob)  429, or 503 with Retry-After -> back at that time, no attempt burned
  raises FetchError                5xx, timeouts, connection errors -> a failure, retried with backoff

A body is decoded with its declared charset only if that is a real text encoding
(TEXT_CHARSETS, all implemented in C and linear); any other (punycode is quadratic, idna
and undefined raise, utf-7 and unicode_escape make lone surrogates) reads as UTF-8. The
text kept holds no NUL and no lone surrogate, which PostgreSQL cannot store.

robots.txt is read up to ROBOTS_MAX_BYTES (the rest is ignored, as RFC 9309 2.5 allows)
and parsed, and each URL checked against it, in a parse worker with the page parser's
deadline (app.outreach.html.off_the_loop): a hostile site's rules cost the event loop
nothing. Past the deadline: PageNotParsed, a failed attempt retried later.
"""

from __future__ import annotations

import asyncio
import codecs
import ssl
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import httpx
from protego import Protego

from app.egress import EgressRefused, Resolver, default_port, guarded_client, literal_refusal, parse_allow_list
from app.pipeline.outcomes import storable
from app.pipeline.stage import DeferJob
from app.retry_after import retry_after
from app.whole_numbers import whole_number
from app.outreach.content_coding import ACCEPT_ENCODING, DecodingError, decoder_for
from app.outreach.html import PageNotParsed, off_the_loop
from app.outreach.sample_alias import sample_site_aliases
from app.outreach.settings import outreach_settings
from app.outreach.urls import BadUrl, normalize_url, origin, same_site

MAX_REDIRECTS = 5
RATE_LIMIT_DEFAULT = timedelta(seconds=60)   # a 429 that does not say how long
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309 2.5: a crawler may stop there (Google does)
# Charsets a body is decoded with, by the names codecs.lookup gives them; anything else
# reads as UTF-8.
TEXT_CHARSETS = frozenset(codecs.lookup(name).name for name in (
    "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be",
    "ascii", "latin-1", *(f"iso-8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16)),
    *(f"windows-{n}" for n in range(1250, 1259)), "koi8-r", "koi8-u", "mac-roman",
    "shift_jis", "cp932", "euc-jp", "euc_jis_2004", "iso-2022-jp", "euc-kr", "cp949", "iso-2022-kr",
    "gb2312", "gbk", "gb18030", "big5", "big5-hkscs", "cp950"))


class FetchError(Exception):
    """The server failed or could not be reached: worth trying again later."""


class RateLimited(DeferJob):
    """The site asked us to come back later (429, or 503 with Retry-After)."""


@dataclass
class Response:
    url: str                 # what was asked for
    final_url: str           # where redirects ended
    status: int | None
    outcome: str
    content_type: str = ""
    text: str | None = None
    note: str | None = None

    @property
    def is_html(self) -> bool:
        return self.content_type in ("text/html", "application/xhtml+xml")


BLOCKED = "blocked"  # the whole note of a refused fetch: no address, no error text


class WebClient:
    """One run's client. robots.txt is read once per site per client (so once per run).

    allow_private: FETCH_ALLOW_PRIVATE ("host:port,..."), the only non-public places
    reachable. aliases: {"host:port" a URL names: "host:port" dialled instead}, `make
    run`'s sample site (the dialled address still passes the egress guard, and the URL's
    own host stays the Host header, so the site's redirects and links keep the alias).
    resolver, verify: the DNS lookup and the TLS trust (tests replace them)."""

    def __init__(self, *, user_agent: str, timeout: float, max_bytes: int, allow_private: str = "",
                 aliases: dict[str, str] | None = None, resolver: Resolver | None = None,
                 verify: ssl.SSLContext | None = None) -> None:
        self.user_agent = user_agent
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.allow = parse_allow_list(allow_private)
        self.aliases = dict(aliases or {})
        self.resolver = resolver
        self.verify = verify
        self._robots: dict[str, asyncio.Task] = {}

    @classmethod
    def from_settings(cls, settings) -> "WebClient":
        """From the queue's settings (the egress allow list, local dev mode) and the example's."""
        own = outreach_settings()
        return cls(user_agent=own.fetch_user_agent, timeout=own.fetch_timeout_seconds,
                   max_bytes=own.fetch_max_bytes, allow_private=settings.fetch_allow_private,
                   aliases=sample_site_aliases(settings))

    def _dialled(self, url: str) -> tuple[str, dict[str, str]]:
        """The URL to request and its extra headers: an aliased host:port is dialled at its
        target, with the alias as the Host header."""
        if not self.aliases:
            return url, {}
        parts = urlsplit(url)
        port = parts.port or default_port(parts.scheme)
        target = self.aliases.get(f"{parts.hostname}:{port}")
        if target is None:
            return url, {}
        host = parts.hostname if port == default_port(parts.scheme) else f"{parts.hostname}:{port}"
        return urlunsplit(parts._replace(netloc=target)), {"Host": host}

    def _client(self) -> httpx.AsyncClient:
        return guarded_client(
            self.allow, self.resolver, verify=self.verify,
            headers={"User-Agent": self.user_agent, "Accept": "text/html, text/plain;q=0.8, */*;q=0.1",
                     "Accept-Encoding": ACCEPT_ENCODING},
            timeout=httpx.Timeout(self.timeout), follow_redirects=False,
            event_hooks={"response": [_take_location]})

    # robots.txt --------------------------------------------------------------------

    async def allowed(self, url: str) -> bool:
        """Does the site's robots.txt let this user agent fetch `url`?"""
        key = origin(url)
        task = self._robots.get(key)
        if task is None:
            task = self._robots[key] = asyncio.ensure_future(self._read_robots(key))
        try:
            parser = await asyncio.shield(task)
        except BaseException:
            if task.done():  # a failed read is not remembered: the retry reads again
                self._robots.pop(key, None)
            raise
        # off the loop too: 500 KiB of rules can cost a few tenths of a second per URL
        return await off_the_loop(_can_fetch, parser, url, self.user_agent, what="robots.txt")

    async def _read_robots(self, site: str) -> Protego:
        """RFC 9309: a 4xx means no rules (allow all); 429/503 with Retry-After defers,
        other 5xx and network errors fail the fetch so it is tried again later. The
        rules are matched as the RFC says: `*` and `$`, the longest match wins, and an
        Allow beats a Disallow of the same length. Only the first ROBOTS_MAX_BYTES are read."""
        resp = await self._get_once(f"{site}/robots.txt", follow=True, cut_at=ROBOTS_MAX_BYTES)
        # 4xx, not text, off-site, refused by the egress guard: no usable rules (a
        # refused site's pages are refused too, so nothing is let through)
        usable = resp.outcome == "ok" and resp.text is not None
        return await off_the_loop(_parse_robots, resp.text if usable else "", what="robots.txt")

    # pages -------------------------------------------------------------------------

    async def get(self, url: str) -> Response:
        """Fetch a page, following redirects within the site (each hop checked against
        robots.txt). The whole fetch, redirects included, gets `timeout` seconds."""
        return await self._get_once(url, follow=True, check_robots=True)

    async def _get_once(self, url: str, *, follow: bool, check_robots: bool = False,
                        cut_at: int | None = None) -> Response:
        """cut_at: keep the body's first cut_at bytes and read no further (robots.txt),
        instead of answering too_large past max_bytes."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._get(url, follow, check_robots, cut_at)
        except (TimeoutError, httpx.TransportError):
            # One text for refused, reset, unreachable and slow alike: the job's
            # last_error must not tell a tenant which ports are open where.
            raise FetchError(f"no answer from {url}: could not connect, "
                             f"or timed out after {self.timeout:g}s") from None

    async def _get(self, url: str, follow: bool, check_robots: bool, cut_at: int | None) -> Response:
        current = url
        async with self._client() as client:
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    dialled, headers = self._dialled(current)
                    async with client.stream("GET", dialled, headers=headers) as r:
                        step = await self._step(url, current, r, follow, check_robots, cut_at)
                except EgressRefused:  # raised before any connection to the refused address
                    return Response(url, current, None, "blocked", note=BLOCKED)
                except httpx.InvalidURL as exc:  # a URL normalize_url took and httpx does not
                    return Response(url, current, None, "client_error", note=f"not a URL we can request: {exc}")
                if isinstance(step, Response):
                    return step
                current = step
        return Response(url, current, None, "too_many_redirects",
                        note=f"more than {MAX_REDIRECTS} redirects")

    async def _step(self, url: str, current: str, r: httpx.Response, follow: bool, check_robots: bool,
                    cut_at: int | None) -> Response | str:
        """What one answer comes to: the fetch's Response, or the next hop to request."""
        if not (r.is_redirect and follow):
            return await self._finish(url, current, r, cut_at)
        location = r.extensions.get(LOCATION, "")
        try:
            target = normalize_url(location, base=current)
        except BadUrl:
            return Response(url, current, r.status_code, "client_error",
                            note=f"redirect to an unusable location {location!r}")
        if not same_site(url, target):
            if literal_refusal(target, self.allow):  # not fetched either way; said as the guard would
                return Response(url, target, r.status_code, "blocked", note=BLOCKED)
            return Response(url, target, r.status_code, "offsite", note=f"redirected off the site to {target}")
        if check_robots and not await self.allowed(target):
            return Response(url, target, r.status_code, "blocked",
                            note=f"redirected to {target}, which robots.txt disallows")
        return target

    async def _finish(self, url: str, final: str, r: httpx.Response, cut_at: int | None) -> Response:
        status = r.status_code
        ctype = r.headers.get("content-type", "text/html").split(";")[0].strip().lower()
        if status == 429 or (status == 503 and r.headers.get("retry-after")):
            delay = retry_after(r.headers.get("retry-after")) or RATE_LIMIT_DEFAULT
            raise RateLimited(delay, f"HTTP {status} from {final}: retry after {int(delay.total_seconds())}s")
        if status >= 500:
            raise FetchError(f"HTTP {status} from {final}")
        if status >= 300:  # 4xx, or a redirect we were told not to follow
            return Response(url, final, status, "client_error", ctype)
        if ctype not in TEXT_TYPES:
            return Response(url, final, status, "not_text", ctype, note=f"not text ({ctype})")
        declared = r.headers.get("content-length", "")
        if cut_at is None and (whole_number(declared) or 0) > self.max_bytes:
            return Response(url, final, status, "too_large", ctype,
                            note=f"{declared} bytes, more than {self.max_bytes}")
        cap = self.max_bytes if cut_at is None else cut_at
        body = _Body(cap)
        # Raw bytes, decoded here piece by piece: httpx would expand a whole chunk at
        # once, and a small compressed chunk can stand for a gigabyte.
        too_large = Response(url, final, status, "too_large", ctype, note=f"more than {cap} bytes")
        try:
            decoder = decoder_for(r.headers.get("content-encoding"), cap)
            async for chunk in r.aiter_raw():
                if not body.take(decoder.feed(chunk)):
                    break
            else:
                body.take(decoder.finish())
        except DecodingError as exc:
            return Response(url, final, status, "bad_encoding", ctype, note=str(exc))
        if body.size > cap and cut_at is None:
            return too_large  # before joining the pieces: a copy of more than the cap
        raw = body.bytes()
        if body.size > cap:
            # cut: the last line is whole or not at all (half a rule is another rule:
            # "Disallow: /private" cut to "Disallow: /")
            raw = raw[:cap]
            raw = raw[:raw.rfind(b"\n") + 1]
        return Response(url, final, status, "ok", ctype, await _decode(raw, r.charset_encoding))


class _Body:
    """A body kept as the pieces it came in (a growing buffer would be copied as it
    grows), up to a cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.pieces: list[bytes] = []
        self.size = 0

    def take(self, pieces) -> bool:
        """Keep the pieces, one at a time; False as soon as they pass the cap (the rest
        are never asked for)."""
        for piece in pieces:
            self.pieces.append(piece)
            self.size += len(piece)
            if self.size > self.cap:
                return False
        return True

    def bytes(self) -> bytes:
        return b"".join(self.pieces)


DECODE_STEP = 64 * 1024


async def _decode(body: bytes, charset: str | None) -> str:
    """The body as text PostgreSQL can store, in linear time (see TEXT_CHARSETS), a step
    at a time with the event loop's turn between steps: bytes a charset does not define
    cost about a microsecond each to replace, 2 s for a hostile 2 MB page in one call."""
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except (LookupError, ValueError):  # a charset Python does not know
        codec = "utf-8"
    decoder = codecs.getincrementaldecoder(codec if codec in TEXT_CHARSETS else "utf-8")(errors="replace")
    parts = []
    for start in range(0, len(body), DECODE_STEP):
        parts.append(decoder.decode(body[start:start + DECODE_STEP]))
        await asyncio.sleep(0)
    parts.append(decoder.decode(b"", final=True))
    return storable("".join(parts))


def _parse_robots(text: str, *, deadline: float) -> Protego:
    rules = Protego.parse(text)
    if time.monotonic() > deadline:
        raise PageNotParsed("robots.txt took too long to read")
    return rules


def _can_fetch(rules: Protego, url: str, agent: str, *, deadline: float) -> bool:
    return rules.can_fetch(url, agent)


LOCATION = "skiplock.location"


async def _take_location(response: httpx.Response) -> None:
    """A response hook: move a redirect's Location out of httpx's way, into
    response.extensions[LOCATION]. httpx parses it for every redirect, followed or not, and
    raises on some a hostile site sends (`data:…`, `http:\\\\host`) before _step could
    call them unusable; _step reads it with normalize_url instead."""
    location = response.headers.get("location")
    if location is not None:
        del response.headers["location"]
        response.extensions[LOCATION] = location


_CLIENTS: "OrderedDict[uuid.UUID, WebClient]" = OrderedDict()


def client_for(ctx) -> WebClient:
    """The run's web client: robots.txt is read once per site per run."""
    client = _CLIENTS.get(ctx.run_id)
    if client is None:
        client = _CLIENTS[ctx.run_id] = WebClient.from_settings(ctx.settings)
        while len(_CLIENTS) > 8:
            _CLIENTS.popitem(last=False)
    return client
