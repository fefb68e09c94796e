"""The crawler's HTTP client: httpx with a time limit per fetch, a size cap, redirects
followed only within the site, robots.txt honoured (RFC 9309), and a user agent that
says who it is. Every connection, redirects and robots.txt included, goes through the
egress guard (app.egress): only public addresses, or FETCH_ALLOW_PRIVATE's host:port.

What a fetch can end in, and what the stages make of it:
  Response.outcome "ok"           2xx with a text body        -> stored (and read)
                   "client_error" 4xx other than 429          -> recorded, job done
                   "not_text"     2xx, not HTML or plain text -> recorded, job done
                   "too_large"    past FETCH_MAX_BYTES (decoded) -> recorded, job done
                   "bad_encoding" a Content-Encoding we cannot undo -> recorded, job done
                   "offsite"      redirected to another site  -> recorded, job done
                   "blocked"      a redirect led where robots.txt disallows, or (note
                                  exactly "blocked") the egress guard refused the address
                   "too_many_redirects"
  raises RateLimited (a DeferJob)  429, or 503 with Retry-After -> back at that time, no attempt burned
  raises FetchError                5xx, timeouts, connection errors -> a failure, retried with backoff
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit, urlunsplit

import httpx
from protego import Protego

from app.egress import EgressRefused, Resolver, default_port, guarded_client, literal_refusal, parse_allow_list
from app.pipeline.stage import DeferJob
from app.outreach.content_coding import ACCEPT_ENCODING, DecodingError, decoder_for
from app.outreach.sample import sample_site_aliases
from app.outreach.settings import outreach_settings
from app.outreach.urls import BadUrl, normalize_url, origin, same_site

MAX_REDIRECTS = 5
RATE_LIMIT_DEFAULT = timedelta(seconds=60)   # a 429 that does not say how long
RATE_LIMIT_MAX = timedelta(days=1)           # longer Retry-After values are capped
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


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


def retry_after(value: str | None, now: datetime | None = None) -> timedelta | None:
    """A Retry-After header (seconds, or an HTTP date) as a delay, capped at a day."""
    if not value:
        return None
    now = now or datetime.now(timezone.utc)
    value = value.strip()
    if value.isdigit():
        delay = timedelta(seconds=int(value))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        delay = when - now
    return max(timedelta(seconds=1), min(delay, RATE_LIMIT_MAX))


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
            timeout=httpx.Timeout(self.timeout), follow_redirects=False)

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
        return parser.can_fetch(url, self.user_agent)

    async def _read_robots(self, site: str) -> Protego:
        """RFC 9309: a 4xx means no rules (allow all); 429/503 with Retry-After defers,
        other 5xx and network errors fail the fetch so it is tried again later. The
        rules are matched as the RFC says: `*` and `$`, the longest match wins, and an
        Allow beats a Disallow of the same length."""
        resp = await self._get_once(f"{site}/robots.txt", read_body=True, follow=True)
        # 4xx, not text, too large, off-site, refused by the egress guard: no usable
        # rules (a refused site's pages are refused too, so nothing is let through)
        usable = resp.outcome == "ok" and resp.text is not None
        return Protego.parse(resp.text if usable else "")

    # pages -------------------------------------------------------------------------

    async def get(self, url: str) -> Response:
        """Fetch a page, following redirects within the site (each hop checked against
        robots.txt). The whole fetch, redirects included, gets `timeout` seconds."""
        return await self._get_once(url, read_body=True, follow=True, check_robots=True)

    async def _get_once(self, url: str, *, read_body: bool, follow: bool,
                        check_robots: bool = False) -> Response:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._get(url, read_body, follow, check_robots)
        except (TimeoutError, httpx.TransportError):
            # One text for refused, reset, unreachable and slow alike: the job's
            # last_error must not tell a tenant which ports are open where.
            raise FetchError(f"no answer from {url}: could not connect, "
                             f"or timed out after {self.timeout:g}s") from None

    async def _get(self, url: str, read_body: bool, follow: bool, check_robots: bool) -> Response:
        current = url
        async with self._client() as client:
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    dialled, headers = self._dialled(current)
                    async with client.stream("GET", dialled, headers=headers) as r:
                        step = await self._step(url, current, r, read_body, follow, check_robots)
                except EgressRefused:  # raised before any connection to the refused address
                    return Response(url, current, None, "blocked", note=BLOCKED)
                if isinstance(step, Response):
                    return step
                current = step
        return Response(url, current, None, "too_many_redirects",
                        note=f"more than {MAX_REDIRECTS} redirects")

    async def _step(self, url: str, current: str, r: httpx.Response, read_body: bool, follow: bool,
                    check_robots: bool) -> Response | str:
        """What one answer comes to: the fetch's Response, or the next hop to request."""
        if not (r.is_redirect and follow):
            return await self._finish(url, current, r, read_body)
        location = r.headers.get("location", "")
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

    async def _finish(self, url: str, final: str, r: httpx.Response, read_body: bool) -> Response:
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
        if declared.isdigit() and int(declared) > self.max_bytes:
            return Response(url, final, status, "too_large", ctype,
                            note=f"{declared} bytes, more than {self.max_bytes}")
        body = _Body(self.max_bytes)
        if read_body:
            # Raw bytes, decoded here piece by piece: httpx would expand a whole chunk at
            # once, and a small compressed chunk can stand for a gigabyte.
            too_large = Response(url, final, status, "too_large", ctype, note=f"more than {self.max_bytes} bytes")
            try:
                decoder = decoder_for(r.headers.get("content-encoding"), self.max_bytes)
                async for chunk in r.aiter_raw():
                    if not body.take(decoder.feed(chunk)):
                        return too_large
                if not body.take(decoder.finish()):
                    return too_large
            except DecodingError as exc:
                return Response(url, final, status, "bad_encoding", ctype, note=str(exc))
        return Response(url, final, status, "ok", ctype, _decode(body.bytes(), r.charset_encoding))


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


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


_CLIENTS: "OrderedDict[uuid.UUID, WebClient]" = OrderedDict()


def client_for(ctx) -> WebClient:
    """The run's web client: robots.txt is read once per site per run."""
    client = _CLIENTS.get(ctx.run_id)
    if client is None:
        client = _CLIENTS[ctx.run_id] = WebClient.from_settings(ctx.settings)
        while len(_CLIENTS) > 8:
            _CLIENTS.popitem(last=False)
    return client
