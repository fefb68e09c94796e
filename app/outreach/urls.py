"""URLs as the crawl sees them: one normal form per page, and what counts as the same site."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# A page's URL is a key of a database index (pages (campaign_id, url)), whose rows are at
# most 2,704 bytes: a longer URL is no page of ours.
MAX_URL_BYTES = 2048
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not tabs, line breaks


class BadUrl(ValueError):
    """Not an http(s) URL with a host."""


def normalize_url(url: str, base: str | None = None) -> str:
    """The page's one spelling: absolute, lower-case scheme and host, no default port,
    no fragment, a path of at least '/'. Raises BadUrl for anything but http(s) with a host,
    and for a URL that names port 0, holds a control character (httpx refuses to request it) or a
    backslash before its query (browsers read it as `/`, urllib does not, so the two
    disagree on the page, even the site, it names), or is longer than MAX_URL_BYTES."""
    if not isinstance(url, str) or not url.strip():
        raise BadUrl("a URL is needed, like https://example.com")
    url = url.strip()
    if len(url) > 4 * MAX_URL_BYTES:  # before resolving it: urljoin of a 2 MB '../../..' is a second's work
        raise BadUrl(f"{url[:100]!r}... is longer than {MAX_URL_BYTES} bytes")
    if base is not None:
        url = urljoin(base, url)
    if _CONTROL.search(url):
        raise BadUrl(f"{url[:100]!r} holds a control character")
    try:
        parts = urlsplit(url)  # drops tabs and line breaks, as browsers do
        port = parts.port
    except ValueError as exc:
        raise BadUrl(f"{url[:100]!r} is not a valid URL: {exc}") from None
    if "\\" in parts.netloc + parts.path:
        raise BadUrl(f"{url[:100]!r} has a backslash before its query")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise BadUrl(f"{url[:100]!r} is not an http(s) URL, like https://example.com")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise BadUrl(f"{url[:100]!r} has no host, like https://example.com")
    if port == 0:  # no server listens there, and site_key would read it as the default port
        raise BadUrl(f"{url[:100]!r} names port 0")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = parts.path or "/"
    normal = urlunsplit((scheme, netloc, path, parts.query, ""))
    if len(normal.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise BadUrl(f"{normal[:100]!r}... is longer than {MAX_URL_BYTES} bytes")
    return normal


def site_key(url: str) -> tuple[str, int]:
    """What makes two URLs the same site: the host without a leading 'www.', and the port.

    http and https of the same host are the same site (a site that moves to https
    redirects there), and so are example.com and www.example.com."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    host = host.removeprefix("www.")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 0)
    if port in (80, 443):
        port = 0
    return host, port


def same_site(a: str, b: str) -> bool:
    return site_key(a) == site_key(b)


def origin(url: str) -> str:
    """scheme://host[:port], where robots.txt lives."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def path_of(url: str) -> str:
    """The path and query, for tables people read."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
