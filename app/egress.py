"""Which addresses an outbound fetch may reach.

Everything a tenant sends (a campaign URL, a crawl payload, a webhook URL) and every
link or redirect found on the web is hostile: it may name the machine itself, the
cloud's metadata service or a private network. Only global unicast addresses are
reachable, unless an exact `host:port` is listed in FETCH_ALLOW_PRIVATE.

The guarded connection resolves a host once, refuses unless every address it resolves
to is public, and then connects to an address that was checked: no second lookup that a
rebinding DNS server could answer differently. TLS (SNI and the certificate check) and
the Host header still use the hostname, because only the socket's address changes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from functools import lru_cache
from typing import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import httpcore
import httpx

from app.whole_numbers import whole_number

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges that `is_global` lets through but that are not plain unicast on the internet.
_NOT_PUBLIC = [ipaddress.ip_network(n) for n in (
    "100.64.0.0/10",     # carrier-grade NAT (RFC 6598)
    "192.0.0.0/24",      # IETF protocol assignments
    "192.88.99.0/24",    # 6to4 relay anycast (deprecated)
    "198.18.0.0/15",     # benchmarking
    "224.0.0.0/4",       # multicast
    "240.0.0.0/4",       # reserved, and the broadcast address
    "64:ff9b:1::/48",    # local-use NAT64 (RFC 8215)
    "2001::/23",         # IETF protocol assignments (Teredo, ORCHIDv2, ...)
    "2001:db8::/32",     # documentation
    "2002::/16",         # 6to4: embeds an IPv4 address, judged below instead
    "fec0::/10",         # site-local (deprecated by RFC 3879, still routed inside some networks)
    "ff00::/8",          # multicast
)]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for: mapped (::ffff:a.b.c.d), compatible
    (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) or 6to4 (2002:aabb:ccdd::)."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    packed = int(ip)
    if ip in _NAT64 or (packed >> 32 == 0 and packed > 1):
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    return None


def is_public(ip: IPAddress) -> bool:
    """True only for a global unicast address (and not one hidden inside IPv6)."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        return is_public(inner)
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip.is_link_local:
        return False
    if ip.version == 6 and ip.scope_id:
        return False
    if not ip.is_global:
        return False
    return not any(ip in net for net in _NOT_PUBLIC if net.version == ip.version)


_NUMBER = re.compile(r"^(0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)$", re.IGNORECASE)


def _number(part: str) -> int | None:
    if not _NUMBER.match(part):
        return None
    if part.lower().startswith("0x"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def literal_ip(host: str) -> IPAddress | None:
    """The address a host names literally, however it is spelled, or None for a name.

    Besides dotted quads and IPv6 (bracketed or not, with a zone), this reads what
    inet_aton and browsers accept: 127.1, 0x7f.1, 0177.0.0.1, 2130706433, 0x7f000001."""
    host = host.strip().rstrip(".").lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_number(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(parts)):
        return None
    value = 0
    for n in head:
        value = value * 256 + n
    value = value * 256 ** (5 - len(parts)) + last
    return ipaddress.IPv4Address(value)


def parse_allow_list(value: str | None) -> frozenset[tuple[str, int]]:
    """FETCH_ALLOW_PRIVATE: "host:port,host:port" as a set of (host, port), lower-case."""
    pairs = set()
    for item in (value or "").split(","):
        item = item.strip().lower()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        number = whole_number(port, max_digits=5)
        if not sep or number is None or not host:
            raise ValueError(f"FETCH_ALLOW_PRIVATE: {item!r} is not host:port")
        pairs.add((host.strip("[]"), number))
    return frozenset(pairs)


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def literal_refusal(url: str, allow: frozenset[tuple[str, int]] = frozenset()) -> str | None:
    """Why a URL can be refused before any lookup (a local name or a non-global literal
    address), or None. The fetch-time check on resolved addresses is the one that counts;
    this only lets the API answer 422 early."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        port = parts.port or default_port(parts.scheme)
    except ValueError:
        return "not a valid URL"
    if (host, port) in allow:
        return None
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return "the address is not public"
    ip = literal_ip(host)
    if ip is not None and not is_public(ip):
        return "the address is not public"
    return None


# The guarded connection -----------------------------------------------------------

class EgressRefused(Exception):
    """The destination is not public (nor listed in FETCH_ALLOW_PRIVATE): no connection
    was attempted. Deliberately not an httpx or OS error, so nothing mistakes it for a
    network failure worth retrying."""


Resolver = Callable[[str, int], Awaitable[Iterable[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for `host` (through the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [info[4][0] for info in infos]


def _is_local_name(host: str) -> bool:
    return host in _LOCAL_NAMES or host.endswith(".localhost")


async def checked_addresses(host: str, port: int, allow: frozenset[tuple[str, int]] = frozenset(),
                            resolver: Resolver | None = None) -> list[IPAddress]:
    """Resolve `host` once and return its addresses, or raise EgressRefused unless every
    one is public (an exact (host, port) in `allow` is exempt from that check, not from
    the lookup). A literal address, in any spelling, is not looked up at all."""
    name = host.strip().rstrip(".").lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    listed = (name, port) in allow
    literal = literal_ip(name)
    if literal is not None:
        addresses = [literal]
    elif _is_local_name(name) and not listed:
        raise EgressRefused(host)
    else:
        addresses = []
        for answer in await (resolver or system_resolver)(name, port):
            try:
                addresses.append(ipaddress.ip_address(answer))
            except ValueError:  # not an address: nothing we could check
                raise EgressRefused(host) from None
        if not addresses:
            raise OSError(f"no address for {host}")
    if not listed and not all(is_public(ip) for ip in addresses):
        raise EgressRefused(host)
    return list(dict.fromkeys(addresses))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer with the check in front: `connect_tcp` is handed the
    URL's host, and opens the socket to an address `checked_addresses` approved. httpcore
    still does TLS with server_hostname set to the URL's host."""

    def __init__(self, allow: frozenset[tuple[str, int]] = frozenset(), resolver: Resolver | None = None,
                 inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.allow = allow
        self.resolver = resolver
        self.inner = inner or httpcore.AnyIOBackend()  # what opens the sockets

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options=None) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await checked_addresses(host, port, self.allow, self.resolver)
        except TimeoutError:
            raise httpcore.ConnectTimeout("the lookup timed out") from None
        except (OSError, UnicodeError):  # NXDOMAIN and the like: a network failure, said without detail
            raise httpcore.ConnectError("could not connect") from None
        failure: Exception = httpcore.ConnectError("could not connect")
        for ip in addresses:
            try:
                return await self.inner.connect_tcp(str(ip), port, timeout=timeout, local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options=None) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


@lru_cache(maxsize=1)
def _default_ssl_context() -> ssl.SSLContext:
    """Built once: loading the CA bundle for every fetch would cost more than the fetch."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport on a GuardedBackend. No proxy from the environment: a proxy
    would make the connection for us, to wherever it resolves the name."""

    def __init__(self, allow: frozenset[tuple[str, int]] = frozenset(), resolver: Resolver | None = None,
                 *, verify: ssl.SSLContext | None = None) -> None:
        context = verify or _default_ssl_context()
        super().__init__(verify=context, trust_env=False)
        # httpx has no parameter for the network backend: the pool it just built is
        # replaced by the same pool on ours (the transport only ever uses `_pool`).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context, network_backend=GuardedBackend(allow, resolver))


def guarded_client(allow: frozenset[tuple[str, int]] = frozenset(), resolver: Resolver | None = None,
                   *, verify: ssl.SSLContext | None = None, **options) -> httpx.AsyncClient:
    """An httpx client whose every connection, redirects included, goes through the guard
    (and nothing from the environment: no proxy, no .netrc)."""
    return httpx.AsyncClient(transport=GuardedTransport(allow, resolver, verify=verify), trust_env=False,
                             **options)
