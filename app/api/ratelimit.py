"""Per-client rate limits, kept in Redis (fixed one-minute windows), failing open.

Two buckets: the manual trigger (/cron/pipeline, TRIGGER_RATE_LIMIT_PER_MINUTE) and the
rest of the API (RATE_LIMIT_PER_MINUTE). Health probes are never limited. The client is
the connection's address (behind Lambda, the caller's source IP, which Mangum passes on).

Without REDIS_URL, or while Redis is down or slow, nothing is limited: the gate answers
"no count" and the request goes on. A limited request is a 429 with Retry-After."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_response
from app.api.redis_gate import RedisGate
from app.settings import Settings

WINDOW_SECONDS = 60
TRIGGER_PATH = "/cron/pipeline"
UNLIMITED_PREFIXES = ("/health/",)


def bucket_for(path: str, settings: Settings) -> tuple[str, int] | None:
    """(bucket, requests a minute) for a path, or None when it is not limited."""
    if path.startswith(UNLIMITED_PREFIXES):
        return None
    if path == TRIGGER_PATH:
        return ("trigger", settings.trigger_rate_limit_per_minute) if settings.trigger_rate_limit_per_minute else None
    return ("api", settings.rate_limit_per_minute) if settings.rate_limit_per_minute else None


async def count_hit(gate: RedisGate, bucket: str, client: str, now: float | None = None) -> tuple[int | None, int]:
    """(requests so far in this window including this one, or None when Redis did not
    answer; seconds until the window ends)."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    resets_in = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
    key = f"skiplock:rate:{bucket}:{client}:{window}"

    async def op(r):
        async with r.pipeline(transaction=True) as p:
            p.incr(key)
            p.expire(key, WINDOW_SECONDS + 5)
            count, _ = await p.execute()
        return int(count)

    return await gate.run(op, None), resets_in


class RateLimit:
    """Pure ASGI middleware; outside the idempotency layer, so a limited request never
    touches Postgres."""

    def __init__(self, app: ASGIApp, settings: Settings, gate: RedisGate) -> None:
        self.app = app
        self.settings = settings
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.gate.configured:
            await self.app(scope, receive, send)
            return
        limited = bucket_for(scope.get("path", ""), self.settings)
        if limited is not None:
            bucket, limit = limited
            client = (scope.get("client") or ("unknown", 0))[0] or "unknown"
            count, resets_in = await count_hit(self.gate, bucket, client)
            if count is not None and count > limit:
                what = "calls to /cron/pipeline" if bucket == "trigger" else "requests"
                response = error_response(
                    429, "rate_limited",
                    f"more than {limit} {what} a minute from {client}; try again in {resets_in} s",
                    {"limit": limit, "windowSeconds": WINDOW_SECONDS, "retryAfterSeconds": resets_in,
                     "bucket": bucket},
                    headers={"Retry-After": str(resets_in)})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
