"""Redis, allowed to die: rate limits and a short read cache that fail open.

Every call goes through `RedisGate.run(op, default)`: it gives up after
REDIS_TIMEOUT_SECONDS and returns `default` on any error, so Redis down (or hung) costs
the API its limits and its cache, never a request. After a failure the gate stops
asking for COOLDOWN_SECONDS, so a dead Redis does not add its timeout to every request;
then it tries again, and a Redis that came back is used again.

Unset REDIS_URL: the gate is dormant and nothing is ever sent."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, TypeVar

log = logging.getLogger("skiplock.redis")

T = TypeVar("T")

COOLDOWN_SECONDS = 5.0

OK = "ok"
DEGRADED = "degraded"
NOT_CONFIGURED = "not configured"


class RedisGate:
    def __init__(self, url: str | None, timeout: float, cooldown: float = COOLDOWN_SECONDS) -> None:
        self.url = url
        self.timeout = timeout
        self.cooldown = cooldown
        self._client = None
        self._down_until = 0.0
        self._down = False

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def _redis(self):
        if self._client is None:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            # No retries and short socket timeouts: the gate's own timeout is the budget.
            self._client = Redis.from_url(
                self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0), retry_on_timeout=False, health_check_interval=0,
                max_connections=50)
        return self._client

    def _failed(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + self.cooldown
        if not self._down:
            self._down = True
            log.warning("redis unavailable (%s: %s); going on without limits and cache",
                        type(exc).__name__, exc)

    def _worked(self) -> None:
        if self._down:
            self._down = False
            log.warning("redis is back")

    async def run(self, op: Callable[[Any], Awaitable[T]], default: T) -> T:
        """op(redis client) within the timeout, or `default` if Redis is off, down or slow."""
        if not self.configured or time.monotonic() < self._down_until:
            return default
        try:
            async with asyncio.timeout(self.timeout):
                value = await op(self._redis())
        except Exception as exc:  # fail open: nothing Redis does may fail a request
            self._failed(exc)
            return default
        self._worked()
        return value

    async def status(self) -> str:
        """For readiness: 'ok', 'degraded' (configured, not answering) or 'not configured'.
        Asks Redis even during a cooldown, and ends the cooldown when it answers."""
        if not self.configured:
            return NOT_CONFIGURED
        try:
            async with asyncio.timeout(self.timeout):
                await self._redis().ping()
        except Exception as exc:
            self._failed(exc)
            return DEGRADED
        self._down_until = 0.0
        self._worked()
        return OK

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception:
                pass


def gate_of(app) -> RedisGate:
    return app.state.redis
