"""Live events over HTTP: GET /events (any host, Lambda included) and the WebSocket
/events/ws (a long-running server), both under the replay rule of app.engine.events.

    GET /events?room=R&after=N[&limit=L]   {"data": [gap?, event...], "nextCursor": seq}
    WS  /events/ws?room=R&after=N          the same replay, then each new event as it commits

A WebSocket authenticates like every route, `Authorization: Bearer <API key>`; a
browser, which cannot set that header, offers the subprotocols `skiplock.events` and
`bearer.<API key>`, or sends `{"type": "auth", "key": "<API key>"}` first. Never in the
URL: URLs land in logs. A tenant reads its own rooms; an admin any."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import Counter
from typing import Any

import asyncpg
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.auth import statement_timeout_ms
from app.api.deps import owner_pool_of, pool_of, tenant_pool_of
from app.api.errors import ApiError, statement_timeout_message
from app.api.pagination import parse_limit, single
from app.api.params import only_params
from app.engine import events as store
from app.engine.accounts import authenticate
from app.engine.db import connect as db_connect
from app.engine.tenancy import Actor, tenant_transaction
from app.events.hub import EventHub, Subscription
from app.json_values import error_body
from app.runtime import DatabaseUnavailable

router = APIRouter(tags=["events"])
ws_router = APIRouter(tags=["events"])

SUBPROTOCOL = "skiplock.events"
BEARER_PROTOCOL = "bearer."
AUTH_WAIT_SECONDS = 5.0
CATCH_UP_PAGE = 500
RECHECK_SECONDS = 5.0
STREAMS_PER_KEY = 10
# Sockets that came without a key and wait (up to AUTH_WAIT_SECONDS) for a first message to
# carry it, per process: anyone can open them, so they are capped like a key's streams.
KEYLESS_WAITING_MAX = 100
WS_MAX_MESSAGE_BYTES = 64 * 1024
_AFTER = re.compile(r"^[0-9]{1,18}$")


class EventPage(BaseModel):
    data: list[dict[str, Any]] = Field(
        description="in seq order: {room, seq, type, data, at} each; first a "
                    "{type: gap, room, after, oldest} when `after` is older than the replay window")
    nextCursor: int = Field(description="pass as ?after= next time: the last seq in data (after, unchanged, "
                                        "when data is empty)")


def _bad(message: str, parameter: str) -> ApiError:
    return ApiError(400, "invalid_parameter", message, {"parameter": parameter})


def parse_room_after(params) -> tuple[str, int]:
    """room (required) and after (default 0) from a query string; ApiError 400 otherwise."""
    rooms = params.getlist("room")
    if len(rooms) != 1:
        raise _bad(f"give room exactly once: {store.ROOM_HELP}", "room")
    try:
        room = store.parse_room(rooms[0])
    except store.BadRoom as exc:
        raise _bad(str(exc), "room") from None
    afters = params.getlist("after")
    if len(afters) > 1:
        raise _bad("give after at most once", "after")
    if afters and not _AFTER.match(afters[0]):
        raise _bad(f"after must be a whole number, the seq of the last event you have, or 0 "
                   f"(got {afters[0][:40]!r})", "after")
    return room, int(afters[0]) if afters else 0


def _no_room(room: str) -> ApiError:
    # another tenant's room and a room that does not exist answer alike
    return ApiError(404, "not_found", f"no room {room} that this key can read", {"room": room})


@router.get("/events", response_model=EventPage, summary="A room's events after a seq",
            openapi_extra={"parameters": [
                {"name": "room", "in": "query", "required": True, "description": store.ROOM_HELP,
                 "schema": {"type": "string", "pattern": store.ROOM_PATTERN}},
                {"name": "after", "in": "query", "required": False,
                 "description": "the seq of the last event you have (default 0: from the start of the window)",
                 "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999_999_999_999}},
                {"name": "limit", "in": "query", "required": False,
                 "description": "events on this page (PAGE_SIZE_DEFAULT when left out, at most PAGE_SIZE_MAX)",
                 "schema": {"type": "integer", "minimum": 1}}]},
            responses={404: {"description": "no such room for this key"}})
async def list_events(request: Request) -> JSONResponse:
    """The events of a room after seq `after`, oldest first. Only the room's last
    EVENTS_REPLAY events are served: an older `after` answers a gap first (refetch the
    state you show, then carry on from `oldest`). Poll with the nextCursor."""
    only_params("room", "after", "limit")(request)
    room, after = parse_room_after(request.query_params)
    settings = request.app.state.runtime.settings
    raw_limit = single(request, "limit")
    limit = settings.page_size_default if raw_limit is None else parse_limit(raw_limit, settings)
    db = await pool_of(request)
    if not await store.room_readable(db, room):
        raise _no_room(room)
    page = await store.read_after(db, room, after, settings.events_replay, limit)
    return JSONResponse({"data": page.items(), "nextCursor": page.cursor})


def event_hub(app) -> EventHub:
    """The app's hub, made on first use: LISTEN on the direct URL (DATABASE_DIRECT_URL,
    else DATABASE_URL), events read through the app's pool."""
    hub = getattr(app.state, "event_hub", None)
    if hub is None:
        runtime = app.state.runtime

        async def connect():
            return await db_connect(await runtime.direct_dsn())

        hub = EventHub(connect, runtime.pool, runtime.settings.events_subscriber_queue)
        app.state.event_hub = hub
    return hub


def _offered_key(ws: WebSocket) -> str | None:
    header = ws.headers.get("authorization")
    if header:
        scheme, _, token = header.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""
    for proto in ws.scope.get("subprotocols") or ():
        if proto.startswith(BEARER_PROTOCOL):
            return proto[len(BEARER_PROTOCOL):]
    return None


async def _refuse(ws: WebSocket, code: int, status: str, message: str, details: Any = None) -> None:
    """The one error shape, then close: 4400 bad request, 4401 no key, 4404 no room, 1011 unavailable."""
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "error", **error_body(status, message, details)}))
        await ws.close(code=code)


async def _first_message_key(ws: WebSocket) -> str | None:
    try:
        text = await asyncio.wait_for(ws.receive_text(), timeout=AUTH_WAIT_SECONDS)
        message = json.loads(text)
    except (asyncio.TimeoutError, ValueError, KeyError, RuntimeError, WebSocketDisconnect):
        return None  # gone before it said who it is: refused like any keyless socket
    if isinstance(message, dict) and message.get("type") == "auth" and isinstance(message.get("key"), str):
        return message["key"]
    return None


@ws_router.websocket("/events/ws")
async def events_ws(ws: WebSocket) -> None:
    wants_protocol = SUBPROTOCOL in (ws.scope.get("subprotocols") or ())
    await ws.accept(subprotocol=SUBPROTOCOL if wants_protocol else None)
    unknown = sorted(set(ws.query_params) - {"room", "after"})
    if unknown:
        return await _refuse(ws, 4400, "unknown_parameter",
                             f"unknown query parameter {unknown[0]!r}; this route takes: 'room', 'after' "
                             "(the API key goes in a header, a subprotocol or the first message, never the URL)",
                             {"unknown": unknown})
    try:
        room, after = parse_room_after(ws.query_params)
    except ApiError as exc:
        return await _refuse(ws, 4400, exc.code, exc.message, exc.details)
    key = _offered_key(ws)
    if key is None:
        state = ws.app.state  # the event loop is the count's only writer
        if getattr(state, "keyless_waiting", 0) >= KEYLESS_WAITING_MAX:
            return await _refuse(ws, 4429, "too_many_waiting",
                                 f"{KEYLESS_WAITING_MAX} sockets already wait here for their first message; "
                                 "send the key as Authorization: Bearer or a 'bearer.<key>' subprotocol, or "
                                 "try again shortly", {"limit": KEYLESS_WAITING_MAX})
        state.keyless_waiting = getattr(state, "keyless_waiting", 0) + 1
        try:
            key = await _first_message_key(ws)
        finally:
            state.keyless_waiting -= 1
    pool = await owner_pool_of(ws)
    actor = await authenticate(pool, key) if key else None
    if actor is None:
        return await _refuse(ws, 4401, "unauthorized", "unknown, revoked or malformed API key (send it as "
                             "Authorization: Bearer, a 'bearer.<key>' subprotocol, or a first message "
                             '{"type": "auth", "key": ...})')
    try:
        pool = await tenant_pool_of(ws, actor)
    except DatabaseUnavailable as exc:
        return await _refuse(ws, 1011, exc.code, str(exc))
    # a stream's reads are a tenant's requests too: held on a lock, they held a tenant
    # connection for as long as the lock lasted, past the limit every other route has
    limit = statement_timeout_ms(ws.app.state.runtime.settings, actor)
    try:
        async with tenant_transaction(pool, actor, statement_timeout_ms=limit) as conn:
            readable = await store.room_readable(conn, room)
    except asyncpg.QueryCanceledError:
        return await _statement_cancelled(ws)
    if not readable:
        return await _refuse(ws, 4404, "not_found", f"no room {room} that this key can read", {"room": room})

    async def key_still_valid() -> bool:
        return await authenticate(await owner_pool_of(ws), key) is not None

    streams = _open_streams(ws.app)
    if streams[actor.key.prefix] >= STREAMS_PER_KEY:
        return await _refuse(ws, 4429, "too_many_streams",
                             f"this API key already has {STREAMS_PER_KEY} event streams open here; close one "
                             "(one stream per room you show is enough)", {"limit": STREAMS_PER_KEY})
    streams[actor.key.prefix] += 1
    try:
        await _stream(ws, pool, actor, limit, room, after, key_still_valid)
    except WebSocketDisconnect:
        pass
    finally:
        streams[actor.key.prefix] -= 1
        if not streams[actor.key.prefix]:
            del streams[actor.key.prefix]


def _open_streams(app) -> Counter:
    """The streams open in this process, by API key prefix."""
    if not hasattr(app.state, "event_streams"):
        app.state.event_streams = Counter()
    return app.state.event_streams


class _KeyRevoked(Exception):
    pass


class _Follower:
    """One socket following one room: what it sends, replay and live alike, goes through
    send(), which stops at once when the client has gone (a dead socket would take the
    rest of a replay page, each write logged by asyncio) and, every RECHECK_SECONDS, asks
    for the key again (a client reading slower than its room grows would otherwise stay in
    the replay, never asked)."""

    def __init__(self, ws: WebSocket, key_still_valid) -> None:
        self.ws = ws
        self.key_still_valid = key_still_valid
        self.checked = time.monotonic()
        self.closed = asyncio.create_task(_until_closed(ws))

    async def check_key(self, now: bool = False) -> None:
        if now or time.monotonic() - self.checked >= RECHECK_SECONDS:
            if not await self.key_still_valid():
                raise _KeyRevoked
            self.checked = time.monotonic()

    async def send(self, item: dict) -> None:
        await asyncio.sleep(0)  # let the reader see a disconnect that has happened
        if self.closed.done():
            raise WebSocketDisconnect(1006)
        await self.check_key()
        try:
            await self.ws.send_text(json.dumps(item))
        except RuntimeError as exc:  # the server closed it already: the client went, or stopped answering pings
            raise WebSocketDisconnect(1006) from exc


async def _statement_cancelled(ws: WebSocket) -> None:
    """The stream's statement ran past TENANT_STATEMENT_TIMEOUT_SECONDS: 1011, as the
    HTTP routes' 503 statement_timeout, and the client reconnects from its last seq."""
    seconds = ws.app.state.runtime.settings.tenant_statement_timeout_seconds
    await _refuse(ws, 1011, "statement_timeout", statement_timeout_message(seconds, "stream"))


async def _stream(ws: WebSocket, pool, actor: Actor, limit: int | None, room: str, after: int,
                  key_still_valid) -> None:
    settings = ws.app.state.runtime.settings
    hub = event_hub(ws.app)
    follower = _Follower(ws, key_still_valid)
    closed = follower.closed
    try:
        async with hub.subscribe(room, after) as sub:
            await _catch_up(follower, pool, actor, limit, sub, settings.events_replay)
            await follower.send({"type": "live", "room": room, "seq": sub.cursor})
            catch_up_due = False
            while not closed.done():
                # live events come from the hub, not from a query as the tenant: a quiet
                # room's key is asked for here, a busy one's as its events are sent
                await follower.check_key()
                if catch_up_due:
                    await _catch_up(follower, pool, actor, limit, sub, settings.events_replay)
                    catch_up_due = False
                waiting = asyncio.create_task(sub.wait())
                done, _ = await asyncio.wait({waiting, closed}, timeout=RECHECK_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
                if waiting not in done:
                    waiting.cancel()
                    # now and then, the database itself: a room whose watch was registered
                    # while a writer was committing got no NOTIFY for that one write
                    catch_up_due = True
                    continue
                batch = waiting.result()
                if batch is None:  # this subscriber fell behind: the database has the rest
                    catch_up_due = True
                    continue
                for event in batch:
                    await follower.send(event.json())
                    sub.cursor = event.seq
    except _KeyRevoked:
        await _refuse(ws, 4401, "unauthorized", "this API key was revoked")
    except asyncio.TimeoutError:
        await _refuse(ws, 1011, "unavailable", "the event listener could not reach the database; try again")
    except asyncpg.QueryCanceledError:
        await _statement_cancelled(ws)
    finally:
        closed.cancel()


async def _catch_up(follower: _Follower, pool, actor: Actor, limit: int | None, sub: Subscription,
                    window: int) -> None:
    """Read from the database (as the tenant, each statement under `limit` ms) until the
    room's head, gap first if due."""
    while True:
        async with tenant_transaction(pool, actor, statement_timeout_ms=limit) as conn:
            page = await store.read_after(conn, sub.room, sub.cursor, window, CATCH_UP_PAGE)
        if page.gap is not None:  # a key revoked since reads its room as empty: no gap, a 4401
            await follower.check_key(now=True)
        for item in page.items():
            await follower.send(item)
        sub.cursor = page.cursor
        if sub.cursor >= page.head:
            return


async def _until_closed(ws: WebSocket) -> None:
    """Read (and ignore) what the client sends, until it goes away."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return


async def close_event_hub(app) -> None:
    hub = getattr(app.state, "event_hub", None)
    if hub is not None:
        await hub.close()
