"""A short cache for the read routes, in Redis, failing open.

A cached answer is the JSON body of a 200, kept CACHE_SECONDS under the tenant, the
path and the sorted query string. Without REDIS_URL (or with CACHE_SECONDS=0, or while Redis is down)
every read goes to Postgres. `Cache-Control: no-cache` skips the cached copy. Writes
through the API drop the cached copy of the one job they changed; lists may be up to
CACHE_SECONDS old. Answers say `X-Cache: hit` or `miss` when the cache is in play."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from fastapi import Request
from fastapi.responses import Response

from app.api.redis_gate import gate_of

PREFIX = "skiplock:cache:"

# For the read routes' OpenAPI: responses={200: CACHED}.
CACHED = {"headers": {"X-Cache": {
    "description": "hit or miss when the Redis cache is in play (REDIS_URL set); absent otherwise",
    "schema": {"type": "string", "enum": ["hit", "miss"]}}}}


def cache_key(scope: str, path: str, query_items: list[tuple[str, str]] | None = None) -> str:
    query = "&".join(f"{k}={v}" for k, v in sorted(query_items or []))
    return f"{PREFIX}{scope}:{path}?{query}"


def _scope(request: Request) -> str:
    """Whose view a cached answer is: tenants never share cached copies."""
    actor = getattr(request.state, "actor", None)
    if actor is None:
        return "public"
    return "admin" if actor.is_admin else f"user:{actor.user_id}"


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


async def cached_json(request: Request, build: Callable[[], Awaitable[dict[str, Any]]],
                      path: str | None = None) -> Response:
    """`path`: the resource's canonical path (as `forget` will name it), when the URL may
    spell it otherwise (an upper-case UUID, say)."""
    gate = gate_of(request.app)
    seconds = request.app.state.runtime.settings.cache_seconds
    if not gate.configured or seconds <= 0:
        return Response(_json(await build()), media_type="application/json")
    key = cache_key(_scope(request), path or request.url.path, list(request.query_params.multi_items()))
    if "no-cache" not in request.headers.get("cache-control", "").lower():
        hit = await gate.run(lambda r: r.get(key), None)
        if hit is not None:
            return Response(bytes(hit), media_type="application/json", headers={"X-Cache": "hit"})
    body = _json(await build())
    await gate.run(lambda r: r.set(key, body, px=max(1, int(seconds * 1000))), None)
    return Response(body, media_type="application/json", headers={"X-Cache": "miss"})


async def forget(request: Request, path: str) -> None:
    """Drop the cached copy of one resource (its plain URL, no query string), as the
    writer and an admin would see it; other views of it expire within CACHE_SECONDS."""
    gate = gate_of(request.app)
    if gate.configured:
        keys = {cache_key(_scope(request), path), cache_key("admin", path)}
        await gate.run(lambda r: r.delete(*keys), None)
