"""Idempotency-Key on every side-effecting request, stored in Postgres.

Which requests: POST, PUT, PATCH and DELETE anywhere in the app, and GET /cron/pipeline
(it runs the pipeline too). A request without the header acts as usual.

    first request with key K      claims K (one INSERT ... ON CONFLICT DO NOTHING), acts,
                                  stores its status, body and Location, then answers
    same K, same request          the stored answer, with `Idempotent-Replayed: true`
    same K, other request         422 idempotency_key_reused (method, path, query and
                                  body are compared; JSON bodies after canonicalising,
                                  so key order and spacing do not matter)
    same K while the first runs   waits up to IDEMPOTENCY_WAIT_SECONDS for its answer and
                                  replays it; after that, 409 idempotency_in_progress
                                  with Retry-After

Only a known route's request gets this far (app/api/route_gate.py answers 404 and 405
first), and it is authenticated before its key is looked at, as its route would do it:
an API key on the tenant routes, CRON_SECRET on /cron/pipeline. A missing, wrong or
revoked credential is that 401, never a replay. Keys are scoped by the credential's id
(the API key's prefix; "cron"), not by how the header is spelled: a stored answer is
replayed only to a request that could have made it.

So two concurrent requests with one key act once. Answers that say nothing about the
effect are not stored and give the key back, so a retry acts: any 5xx (the work did
not happen, or not all of it: the database was down, an unexpected error), 401 and 403
(wrong credentials), 429. A holder that died leaves its key in progress; after
PLATFORM_LIMIT_SECONDS (no request lives longer) the same request takes it over.
Keys are forgotten after IDEMPOTENCY_RETENTION_HOURS (the maintenance task
expire_idempotency_keys)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import key_holder
from app.api.cron import require_cron_secret
from app.api.errors import ApiError, database_unavailable_response, error_response
from app.api.ratelimit import TRIGGER_PATH
from app.runtime import DATABASE_ERRORS, DatabaseUnavailable, Runtime, database_errors
from app.engine import idempotency as store

log = logging.getLogger("skiplock.api")

HEADER = b"idempotency-key"
REPLAYED = "Idempotent-Replayed"
SIDE_EFFECT_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SIDE_EFFECT_GETS = frozenset({TRIGGER_PATH})
MAX_KEY_LENGTH = 255
KEPT_HEADERS = ("content-type", "location", "retry-after")
NOT_STORED = frozenset({401, 403, 429})


def applies(method: str, path: str) -> bool:
    return method in SIDE_EFFECT_METHODS or (method == "GET" and path in SIDE_EFFECT_GETS)


def canonical_body(body: bytes) -> bytes:
    """JSON bodies compare by value (key order and spacing aside); others byte for byte."""
    if not body.strip():
        return b""
    try:
        value = json.loads(body)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested too deep to care
        return body


def fingerprint(method: str, path: str, query_string: bytes, body: bytes) -> str:
    query = sorted(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))
    h = hashlib.sha256()
    for part in (method.encode(), path.encode("utf-8", "surrogatepass"), json.dumps(query).encode(),
                 canonical_body(body)):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def scoped_key(key: str, credential: str) -> str:
    """Keys live in the namespace of the credential that sent them (credential_of)."""
    return f"{credential}:{key}"


async def credential_of(scope: Scope) -> str:
    """Authenticate the request as its route will (raising the route's own ApiError, a
    401 or a 503) and return the id of the credential it carries: the cron route takes
    CRON_SECRET, every other side-effecting route an API key (a route added without one
    fails closed here, never open). The route then takes the actor found here (key_holder
    keeps it on the request's state) rather than looking the key up again."""
    request = Request(scope)
    if scope.get("path") == TRIGGER_PATH:
        require_cron_secret(request)
        return "cron"
    _, prefix = await key_holder(request)
    return f"key:{prefix}"


def _valid_key(key: str) -> bool:
    return 0 < len(key) <= MAX_KEY_LENGTH and all(0x21 <= ord(c) <= 0x7E for c in key)


class Idempotency:
    """Pure ASGI middleware over the app (inside the rate limiter)."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not applies(scope["method"], scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        keys = [v for k, v in scope.get("headers", []) if k.lower() == HEADER]
        if not keys:
            await self.app(scope, receive, send)
            return

        async def answer(status: int, code: str, message: str, details: Any = None,
                         headers: dict[str, str] | None = None) -> None:
            await error_response(status, code, message, details, headers)(scope, _no_receive, send)

        key = keys[0].decode("latin-1").strip()
        if len(keys) > 1 or not _valid_key(key):
            await answer(400, "invalid_idempotency_key",
                         f"Idempotency-Key must be sent once, 1 to {MAX_KEY_LENGTH} visible ASCII "
                         "characters (a UUID is a good choice)", {"header": "Idempotency-Key"})
            return
        try:
            with database_errors():
                credential = await credential_of(scope)
        except ApiError as exc:
            await answer(exc.status_code, exc.code, exc.message, exc.details, exc.headers)
            return
        except DatabaseUnavailable as exc:
            await database_unavailable_response(exc)(scope, _no_receive, send)
            return
        body = await _read_body(receive)  # at most MAX_BODY_BYTES: app/api/body_limit.py counts it
        if body is None:
            return  # the client left mid-body: nothing to act on, nobody to answer, the key untouched
        method = scope["method"]
        path = scope.get("path", "").replace("\x00", "%00")  # a NUL in a path parameter is not storable text
        fp = fingerprint(method, path, scope.get("query_string", b""), body)
        key = scoped_key(key, credential)
        try:
            with database_errors():
                pool = await self.runtime.pool()
                token = await store.claim(pool, key, method, path, fp)
                if token is None:
                    token = await self._wait_for_first(pool, key, fp, method, path, scope, receive, send)
                    if token is None:
                        return  # answered: a replay, a mismatch or still in progress
        except DatabaseUnavailable as exc:  # outside the routes' exception handlers: answered here
            await database_unavailable_response(exc)(scope, _no_receive, send)
            return
        await self._act(pool, key, token, body, scope, receive, send)

    async def _wait_for_first(self, pool, key: str, fp: str, method: str, path: str,
                              scope: Scope, receive: Receive, send: Send):
        """Someone holds the key: replay their answer, refuse a different request, or wait.
        Returns a claim token when this request ends up holding the key after all."""
        settings = self.runtime.settings
        deadline = time.monotonic() + settings.idempotency_wait_seconds
        delay = 0.02
        while True:
            first = await store.get(pool, key)
            if first is None:  # the holder gave it back (its answer was not kept): act
                token = await store.claim(pool, key, method, path, fp)
                if token is not None:
                    return token
                await asyncio.sleep(0.01)
                continue
            if first.fingerprint != fp:
                same_route = (first.method, first.path) == (method, path)
                await error_response(
                    422, "idempotency_key_reused",
                    "this Idempotency-Key was first used for "
                    + ("the same route with a different body or query" if same_route
                       else f"{first.method} {first.path}")
                    + "; send a new key for a new request",
                    {"header": "Idempotency-Key", "firstRequest": {"method": first.method, "path": first.path}},
                )(scope, _no_receive, send)
                return None
            if first.done:
                headers = {k: v for k, v in first.headers.items() if k != "content-type"}
                headers[REPLAYED] = "true"
                await Response(first.body, status_code=first.status, headers=headers,
                               media_type=first.headers.get("content-type", "application/json")
                               )(scope, _no_receive, send)
                return None
            if first.held_seconds > settings.platform_limit_seconds:
                token = await store.take_over(pool, key, fp, settings.platform_limit_seconds)
                if token is not None:
                    return token
            if time.monotonic() >= deadline:
                await error_response(
                    409, "idempotency_in_progress",
                    "the first request with this Idempotency-Key is still in progress; "
                    "send the same request again shortly to get its answer",
                    {"header": "Idempotency-Key"}, headers={"Retry-After": "1"},
                )(scope, _no_receive, send)
                return None
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.25)

    async def _act(self, pool, key: str, token, body: bytes,
                   scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request with the key held; store the answer before the client sees it."""
        sent_body = False

        async def replay_receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, replay_receive, capture)
        except Exception:
            await self._release(pool, key, token)
            raise
        status = int(start.get("status", 500))
        raw_headers = start.get("headers", [])
        response_body = b"".join(chunks)
        if status >= 500 or status in NOT_STORED:
            await self._release(pool, key, token)
        else:
            kept = {}
            for name, value in raw_headers:
                lname = name.decode("latin-1").lower()
                if lname in KEPT_HEADERS:
                    kept[lname] = value.decode("latin-1")
            try:
                await store.store(pool, key, token, status, kept, response_body)
            except DATABASE_ERRORS as exc:
                log.warning("could not store the answer for Idempotency-Key %r: %s", key, exc)
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": response_body, "more_body": False})

    async def _release(self, pool, key: str, token) -> None:
        try:
            await store.release(pool, key, token)
        except DATABASE_ERRORS as exc:
            log.warning("could not release Idempotency-Key %r: %s", key, exc)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client went away before sending all of it (acted
    on, the cut body would be refused and its 422 kept, and the key's retry refused)."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)
