"""Which addresses an outbound fetch may reach.

Everything a tenant sends (a campaign URL, a crawl payload, a webhook URL) and every
link or redirect found on the web is hostile: it may name the machine itself, the
cloud's metadata service or a private network. Only global unicast addresses are
reachable, unless an exact `host:port` is listed in FETCH_ALLOW_PRIVATE.

This module only classifies; the guarded fetch (resolve once, connect to the address
that was checked) is built on it.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

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
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"FETCH_ALLOW_PRIVATE: {item!r} is not host:port")
        pairs.add((host.strip("[]"), int(port)))
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
