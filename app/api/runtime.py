"""What the adapters (HTTP routes, the Lambda handler, the local ticker) share: the
settings, the stage list, and one asyncpg pool created on first use.

The pool is created lazily and kept: in Lambda the process (and this object) lives
across warm invocations, so each invocation reuses the pool instead of opening and
closing one. A failed attempt is not cached; the next call tries again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from app.engine.db import create_pool
from app.pipeline.loop import RunResult, run_pipeline
from app.pipeline.registry import check_stages, load_stages
from app.pipeline.stage import Stage
from app.settings import Settings

log = logging.getLogger("skiplock.api")

# What "the database is not there" looks like from asyncpg and the socket layer.
DATABASE_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class DatabaseNotConfigured(RuntimeError):
    pass


class Runtime:
    def __init__(self, settings: Settings, stages: list[Stage] | None = None) -> None:
        self.settings = settings
        if stages is None:
            stages = load_stages(settings.pipeline_stages)
        else:
            check_stages(stages, "create_app(stages=...)")
        self.stages = stages
        self._pool: asyncpg.Pool | None = None
        self._lock: asyncio.Lock | None = None
        self.pools_created = 0

    async def dsn(self) -> str:
        if self.settings.database_url:
            return self.settings.database_url
        if self.settings.local_dev:
            from pathlib import Path

            from app.devdb import local_database_url
            return await local_database_url(Path(self.settings.local_data_dir))
        raise DatabaseNotConfigured("DATABASE_URL is not set")

    async def pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pool is None:
                self._pool = await create_pool(await self.dsn(), self.settings.db_pool_size)
                self.pools_created += 1
        return self._pool

    async def run(self, trigger: str, budget: float | None = None,
                  hard_limit: float | None = None) -> RunResult:
        pool = await self.pool()
        return await run_pipeline(pool, self.stages, trigger=trigger, budget=budget,
                                  settings=self.settings, hard_limit=hard_limit)

    def effective_budget(self, requested: float | None, remaining: float | None = None) -> float:
        """The claiming budget: the request, capped by the setting and, in Lambda, by the
        time the invocation has left minus LAMBDA_SAFETY_MARGIN_SECONDS."""
        s = self.settings
        budget = s.pipeline_budget_seconds if requested is None else min(requested, s.pipeline_budget_seconds)
        if remaining is not None:
            budget = min(budget, remaining - s.lambda_safety_margin_seconds)
        return max(0.0, budget)

    def hard_limit(self, remaining: float | None) -> float | None:
        """Seconds until the host kills us, minus what recording the run needs."""
        if remaining is None:
            return None  # the pipeline's default: PLATFORM_LIMIT - FINISH_MARGIN
        return max(0.0, remaining - self.settings.finish_margin_seconds)

    async def run_within(self, trigger: str, requested: float | None,
                         remaining: float | None) -> tuple[RunResult, float]:
        budget = self.effective_budget(requested, remaining)
        result = await self.run(trigger, budget=budget, hard_limit=self.hard_limit(remaining))
        return result, budget

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def run_json(result: RunResult, budget: float) -> dict[str, Any]:
    """The run's summary as the endpoint and the Lambda handler return it."""
    return {**result.to_json(), "budgetSeconds": round(budget, 3)}
