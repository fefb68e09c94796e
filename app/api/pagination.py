"""Keyset pages for every list route, and the strict query string they take.

A page is newest first over (created_at, id) (jobs: over their time-ordered id); the answer is

    {"data": [...], "nextCursor": "<opaque>" | null}

and never carries a total. The cursor is base64url(JSON) + "." + base64url(HMAC): it
names the route and a digest of the filters it was made with, so a tampered cursor, one
from another route or another deployment, or one reused with other filters is a 400,
never a 500 and never a silently wrong page.

Query parameters are parsed here, not by FastAPI, so that every problem with one (an
unknown name, a repeat, a bad value) is a 400 whose message says what to send instead.
The OpenAPI document still describes each one: `ListQuery.openapi()`."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from fastapi import Request

from app.api.errors import ApiError
from app.api.params import only_params
from app.settings import Settings

Keyset = tuple[datetime, uuid.UUID]

# CURSOR_SECRET unset: a key of this process's own, never one derived from another secret
# (derived from CRON_SECRET, one signed cursor let a tenant test cron-secret guesses offline).
_PROCESS_KEY = secrets.token_bytes(32)
_B64 = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_CURSOR_LENGTH = 512
# A page's items stop before this many bytes of JSON: 200 jobs of 64 KiB payloads were a
# 13 MB answer, more than AWS Lambda sends back (6 MB) and a lot to hold for one request.
PAGE_MAX_BYTES = 4 * 1024 * 1024
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"


def cursor_key(settings: Settings) -> bytes:
    """CURSOR_SECRET; else a random key of this process (a cursor from another process is
    then a 400: set CURSOR_SECRET where several serve). Every secret stands alone: the
    cursor key is derived from none, and no other secret from it."""
    if settings.cursor_secret is not None:
        return settings.cursor_secret.get_secret_value().encode()
    return _PROCESS_KEY


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not _B64.match(text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()[:16]


def scope_digest(filters: dict[str, Any]) -> str:
    """A short digest of the filters a page was asked with (None values left out)."""
    items = sorted((k, str(v)) for k, v in filters.items() if v is not None)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def make_cursor(key: bytes, route: str, scope: str, at: datetime, row_id: uuid.UUID) -> str:
    payload = json.dumps({"v": 1, "r": route, "s": scope, "t": at.isoformat(), "i": str(row_id)},
                         separators=(",", ":")).encode()
    return f"{_b64(payload)}.{_b64(_sign(key, payload))}"


def _bad_cursor(message: str) -> ApiError:
    return ApiError(400, "invalid_cursor",
                    f"{message}; send the nextCursor of the previous page unchanged, or leave "
                    "cursor out to start from the newest", {"parameter": "cursor"})


def read_cursor(key: bytes, route: str, scope: str, raw: str) -> Keyset:
    """The keyset a cursor carries, or a 400 that says what is wrong with it."""
    if not raw or len(raw) > MAX_CURSOR_LENGTH or raw.count(".") != 1:
        raise _bad_cursor("cursor is not one this API made")
    body, signature = raw.split(".")
    try:
        payload, given = _unb64(body), _unb64(signature)
    except (ValueError, binascii.Error):
        raise _bad_cursor("cursor is not one this API made") from None
    if not hmac.compare_digest(given, _sign(key, payload)):
        raise _bad_cursor("cursor was changed, or was made by another deployment")
    try:
        data = json.loads(payload)
        assert isinstance(data, dict) and data.get("v") == 1
        at = datetime.fromisoformat(data["t"])
        row_id = uuid.UUID(data["i"])
        assert at.tzinfo is not None
    except Exception:
        raise _bad_cursor("cursor is not one this API made") from None
    if data.get("r") != route:
        raise _bad_cursor(f"cursor belongs to another list ({data.get('r')!r}), not to {route!r}")
    if data.get("s") != scope:
        raise _bad_cursor("cursor was made with other filters; keep the filters the same while paging")
    return at, row_id


@dataclass(frozen=True)
class Param:
    """One optional filter: its name, what it means, its OpenAPI schema, and a parser
    (raw string, request) -> value that raises ValueError with a message a person can act on."""
    name: str
    description: str
    schema: dict[str, Any]
    parse: Callable[[str, Request], Any]


@dataclass
class Page:
    filters: dict[str, Any]
    limit: int
    after: Keyset | None
    route: str
    scope: str
    key: bytes

    def answer(self, rows: Sequence[Any], render: Callable[[Any], dict[str, Any]],
               keyset: Callable[[Any], Keyset]) -> dict[str, Any]:
        """The page's JSON from rows fetched with limit + 1 (the extra row only says
        whether there is a next page). A page also stops before PAGE_MAX_BYTES of items
        (never before its first): then it is shorter than limit and has a nextCursor."""
        data: list[dict[str, Any]] = []
        size = 0
        for row in rows[: self.limit]:
            item = render(row)
            size += len(json.dumps(item, ensure_ascii=False, default=str).encode()) + 1
            if data and size > PAGE_MAX_BYTES:
                break
            data.append(item)
            last = row
        next_cursor = None
        if len(rows) > len(data) and data:
            at, row_id = keyset(last)
            next_cursor = make_cursor(self.key, self.route, self.scope, at, row_id)
        return {"data": data, "nextCursor": next_cursor}


def single(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ApiError(400, "invalid_parameter", f"give {name!r} at most once (it came {len(values)} times)",
                       {"parameter": name})
    return values[0] if values else None


def parse_limit(raw: str, settings: Settings) -> int:
    top = settings.page_size_max
    if not re.fullmatch(r"[0-9]{1,6}", raw) or not 1 <= int(raw) <= top:
        raise ApiError(400, "invalid_parameter",
                       f"limit must be a whole number from 1 to {top} (got {raw[:40]!r})",
                       {"parameter": "limit", "minimum": 1, "maximum": top})
    return int(raw)


@dataclass
class ListQuery:
    """The query string of one list route: its filters, plus `limit` and `cursor`."""
    route: str
    filters: list[Param] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.filters] + ["limit", "cursor"]

    def parse(self, request: Request) -> Page:
        only_params(*self.names)(request)
        settings: Settings = request.app.state.runtime.settings
        values: dict[str, Any] = {}
        for p in self.filters:
            raw = single(request, p.name)
            if raw is None:
                values[p.name] = None
                continue
            try:
                values[p.name] = p.parse(raw, request)
            except ValueError as exc:
                raise ApiError(400, "invalid_parameter", f"{p.name}: {exc}", {"parameter": p.name}) from None
        raw_limit = single(request, "limit")
        limit = settings.page_size_default if raw_limit is None else parse_limit(raw_limit, settings)
        # path parameters (a lane's id, say) belong to the listing too: a cursor made
        # for one lane's rows is foreign to another's
        scope = scope_digest({**{f"path:{k}": v for k, v in request.path_params.items()}, **values})
        key = cursor_key(settings)
        raw_cursor = single(request, "cursor")
        after = None if raw_cursor is None else read_cursor(key, self.route, scope, raw_cursor)
        return Page(values, limit, after, self.route, scope, key)

    def openapi(self) -> list[dict[str, Any]]:
        """The parameters for the route's `openapi_extra` (limit's bounds are filled in
        from the settings when the document is built: see app/api/openapi.py)."""
        params = [{"name": p.name, "in": "query", "required": False, "description": p.description,
                   "schema": p.schema} for p in self.filters]
        params.append({"name": "limit", "in": "query", "required": False,
                       "description": "rows on this page (PAGE_SIZE_DEFAULT when left out, at most PAGE_SIZE_MAX)",
                       "schema": {"type": "integer", "minimum": 1}})
        params.append({"name": "cursor", "in": "query", "required": False,
                       "description": "the nextCursor of the previous page, unchanged, with the same filters; "
                                      "leave out for the newest rows",
                       "schema": {"type": "string", "minLength": 3, "maxLength": MAX_CURSOR_LENGTH,
                                  "pattern": CURSOR_PATTERN}})
        return params


def enum_param(name: str, description: str, choices: Sequence[str]) -> Param:
    def parse(raw: str, request: Request) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (got {raw[:40]!r})")
        return raw
    return Param(name, description, {"type": "string", "enum": list(choices)}, parse)


def uuid_param(name: str, description: str) -> Param:
    def parse(raw: str, request: Request) -> uuid.UUID:
        try:
            return uuid.UUID(raw)
        except ValueError:
            raise ValueError(f"must be a UUID like 3f2c0e5a-8c1b-4c9e-9f55-0d6a5b8f1e27 (got {raw[:40]!r})") from None
    return Param(name, description, {"type": "string", "format": "uuid"}, parse)


def word_param(name: str, description: str, max_length: int = 100) -> Param:
    pattern = rf"^[A-Za-z0-9_.:-]{{1,{max_length}}}$"

    def parse(raw: str, request: Request) -> str:
        if not re.fullmatch(pattern[1:-1], raw):
            raise ValueError(f"must be 1 to {max_length} letters, digits or _ . : - (got {raw[:40]!r})")
        return raw
    return Param(name, description, {"type": "string", "pattern": pattern}, parse)


def time_param(name: str, description: str) -> Param:
    """A date-time (ISO 8601 / RFC 3339; no zone: UTC), kept within [1970, 9999): earlier
    and later times mean the same to a filter, and every one then fits PostgreSQL and Python."""
    earliest, latest = datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(9999, 1, 1, tzinfo=timezone.utc)

    def parse(raw: str, request: Request) -> datetime:
        # an unencoded '+' of an offset arrives as a space; RFC 3339 allows a lower-case t and z
        text = re.sub(r" (\d\d:?\d\d)$", r"+\1", raw.upper()) if "T" in raw.upper() else raw
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"must be a date-time like 2030-01-02T03:04:05Z (got {raw[:40]!r})") from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        try:
            return min(max(at.astimezone(timezone.utc), earliest), latest)
        except OverflowError:  # past year 1 or 9999 once in UTC
            return earliest if at.year < 5000 else latest
    return Param(name, description, {"type": "string", "format": "date-time"}, parse)


def text_param(name: str, description: str, min_length: int = 1, max_length: int = 200) -> Param:
    """Free text to search for: `min_length` to `max_length` characters, no NUL (PostgreSQL
    text holds none)."""
    def parse(raw: str, request: Request) -> str:
        if not min_length <= len(raw) <= max_length or "\x00" in raw:
            raise ValueError(f"must be {min_length} to {max_length} characters without NUL (got {len(raw)})")
        return raw
    return Param(name, description, {"type": "string", "minLength": min_length, "maxLength": max_length,
                                     "pattern": "^[^\\u0000]*$"}, parse)
