"""Bounded work per request before any of it is parsed or validated: a JSON body's shape is
counted first, on its bytes, and one past the bounds is a 413 body_too_complex.

A 0.98 MB object with 60,000 unknown keys sent to `POST /campaigns` cost about 0.3 s of the
event loop before its 422 (most of it building 60,001 validation errors), and four at once
took `/health/live` from 1-3 ms to 384 ms at the median. The cost of parsing and validating
grows with the number of values, not of bytes, so that is what is bounded, for every route:

- at most JSON_MAX_VALUES values in all (keys, strings, numbers, literals, arrays, objects);
- at most JSON_MAX_OBJECT_KEYS keys in one object (each unknown key is one error);
- at most MAX_DEPTH levels of nesting (Python's parser recurses).

The count is C work over the bytes (escapes dropped, strings split off, structural bytes
counted: a few milliseconds for a megabyte), with a walk over the brackets only when the
counts say a limit may be near. The body was already read whole under MAX_BODY_BYTES and
REQUEST_BODY_TIMEOUT_SECONDS (body_limit.py, outside this); it is handed on unchanged.
The errors a 422 reports are capped too (errors.MAX_PROBLEMS)."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response

MAX_DEPTH = 64  # a payload nests at most 32 deep (app/pipeline/payloads.py), inside a body or a batch
_STRUCTURE = re.compile(rb"[{}\[\]:]")


def shape_problem(body: bytes, max_values: int, max_keys: int, max_depth: int = MAX_DEPTH) -> str | None:
    """Why `body`, read as JSON, is past a bound; None when it is within them (or is not JSON
    at all: the parser says so later, after reading at most the first bad byte)."""
    # drop escaped backslashes, then escaped quotes: every quote left opens or closes a string
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = text.count(b'"') // 2
    if strings > max_values:
        return f"has more than {max_values} values (JSON_MAX_VALUES)"
    outside = b"".join(text.split(b'"')[::2]) if strings else text
    colons = outside.count(b":")
    openings = outside.count(b"{") + outside.count(b"[")
    # every value or key but the first follows one of , : [ {
    if outside.count(b",") + colons + openings + 1 > max_values:
        return f"has more than {max_values} values (JSON_MAX_VALUES)"
    if colons <= max_keys and openings <= max_depth:
        return None  # no object can have more keys, nor the nesting be deeper
    keys: list[int] = []  # per open container: its keys so far (an array: -1)
    for match in _STRUCTURE.finditer(outside):
        char = match.group()
        if char == b"{" or char == b"[":
            keys.append(0 if char == b"{" else -1)
            if len(keys) > max_depth:
                return f"is nested more than {max_depth} deep"
        elif char == b":":
            if keys and keys[-1] >= 0:
                keys[-1] += 1
                if keys[-1] > max_keys:
                    return f"has an object with more than {max_keys} keys (JSON_MAX_OBJECT_KEYS)"
        elif keys:
            keys.pop()
    return None


def _looks_like_json(body: bytes) -> bool:
    start = body.lstrip()[:1]
    return start in (b"{", b"[")


class BodyShape:
    """Pure ASGI middleware, inside the body cap and route matching, outside everything that
    parses a body (the Idempotency layer, FastAPI)."""

    def __init__(self, app: ASGIApp, max_values: int, max_keys: int) -> None:
        self.app = app
        self.max_values = max_values
        self.max_keys = max_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _may_have_body(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nobody to answer
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = shape_problem(body, self.max_values, self.max_keys) if _looks_like_json(body) else None
        if problem is not None:
            response = error_response(413, "body_too_complex", f"the JSON body {problem}; send less at once",
                                      {"maxValues": self.max_values, "maxObjectKeys": self.max_keys,
                                       "maxDepth": MAX_DEPTH})
            await response(scope, receive, send)
            return
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, as before

        await self.app(scope, replay, send)


def _may_have_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False
