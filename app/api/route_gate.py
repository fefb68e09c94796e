"""Route matching before anything else looks at a request: an unknown path is a 404 and
a method the path does not take is a 405 (with an Allow header naming every method the
path does take), in the one error shape, before the Idempotency layer reads a body or
claims a key for a request that no route would ever serve.

HEAD on a path that GET serves is answered as that GET, without the body (RFC 9110
9.3.2; FastAPI's routes take only the methods they name, so it was a 405). Not on a GET
that acts (`/cron/pipeline` runs the pipeline): a link checker's HEAD must not start a run."""

from __future__ import annotations

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.api.ratelimit import TRIGGER_PATH


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# GETs with an effect: HEAD is not theirs (the Idempotency layer names the same ones).
ACTING_GETS = frozenset({TRIGGER_PATH})


def _match(routes: list[BaseRoute], scope: Scope) -> Match:
    best = Match.NONE
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return match
        if match is Match.PARTIAL:
            best = match
    return best


def allowed_methods(scope: Scope) -> set[str] | None:
    """None when some route serves this request as it is; otherwise the methods its path
    does take (empty: no route has this path). Asked of the routes themselves, so
    included routers count as they will when the request is routed."""
    routes = scope["app"].router.routes
    match = _match(routes, scope)
    if match is Match.FULL:
        return None
    if match is Match.NONE:
        return set()
    allowed = {m for m in METHODS if _match(routes, {**scope, "method": m}) is Match.FULL}
    if "GET" in allowed and scope.get("path") not in ACTING_GETS:
        allowed.add("HEAD")
    return allowed


def _without_body(send: Send) -> Send:
    """The GET's answer, headers (Content-Length included) and no body bytes."""
    async def head_send(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)
    return head_send


class RouteGate:
    """Pure ASGI middleware, outside the Idempotency layer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed = allowed_methods(scope)
        if allowed is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD" and "HEAD" in allowed:
            # served as the GET (rate limits, auth and the cache too); the server's own
            # scope still says HEAD, so uvicorn sends no body either
            await self.app({**scope, "method": "GET"}, receive, _without_body(send))
            return
        method, path = scope["method"], scope.get("path", "")
        if allowed:
            response = error_response(405, "method_not_allowed", f"{method} is not allowed on {path}",
                                      {"allowed": sorted(allowed)}, {"Allow": ", ".join(sorted(allowed))})
        else:
            response = error_response(404, "not_found", f"no route {method} {path}")
        await response(scope, receive, send)
