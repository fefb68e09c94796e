"""What every adapter shares (the HTTP routes, the Lambda handler, the CLI and `make run`):
the settings, the stage list, one asyncpg pool, where the database is, how long a run may
claim, the one JSON shape of a run, and what "the database is not there" looks like.

The pool is created lazily and kept: in Lambda the process (and this object) lives
across warm invocations, so each invocation reuses the pool instead of opening and
closing one. A failed attempt is not cached; the next call tries again."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit
from typing import Any, Callable, Iterator, Mapping

import asyncpg

from app.engine.db import create_pool
from app.engine.queries import statement
from app.json_values import iso
from app.pipeline.loop import Pipeline, RunResult
from app.pipeline.registry import RESERVED_TYPES, check_stages, load_stages
from app.pipeline.run_record import OPEN_RETRY_SECONDS, RunNotRecorded, retrying
from app.pipeline.stage import Stage
from app.plugin import Plugin, load_plugins, plugin_stages
from app.settings import Settings

log = logging.getLogger("skiplock.runtime")

# What "the database is not there" looks like from asyncpg and the socket layer.
DATABASE_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class DatabaseUnavailable(RuntimeError):
    """The database cannot be used now: HTTP answers 503 with `code`, the CLI exits 2."""
    code = "database_unavailable"
    state = "unreachable"  # what /health/ready reports as "database"


class DatabaseNotConfigured(DatabaseUnavailable):
    code = "database_not_configured"
    state = "not configured"


# A refused tenant login is looked at again after this long (a fixed role needs no restart).
TENANT_RECHECK_SECONDS = 30.0
TENANT_REFUSED = "the tenant database login may do more than the API role; see the log"


class TenantLoginRefused(DatabaseUnavailable):
    """TENANT_DATABASE_URL's login may do more than skiplock_api: tenant requests are
    refused rather than served with more power than the role. The reasons go to the log,
    not to the client."""
    code = "tenant_login_refused"
    state = "tenant login refused"


@contextmanager
def database_errors() -> Iterator[None]:
    """Inside: any of DATABASE_ERRORS leaves as DatabaseUnavailable (the cause chained,
    for the log; the message names only the kind of failure, never its internals)."""
    try:
        yield
    except DATABASE_ERRORS as exc:
        raise DatabaseUnavailable(f"the database is not reachable: {type(exc).__name__}") from exc


def in_schema(url: str, schema: str) -> str:
    """The URL with the queue's schema first on its sessions' search_path (a startup
    option, which asyncpg and libpq both read). A transaction pooler's URL is left as it
    is: PgBouncer refuses startup options, and its login's own default search_path is
    what counts there (docs/deploy.md#behind-a-connection-pooler)."""
    parts = urlsplit(url)
    option = f"-c search_path={schema}"
    if ("options", option) in parse_qsl(parts.query):
        return url
    query = "&".join(p for p in [parts.query, urlencode({"options": option}, quote_via=quote)] if p)
    return urlunsplit(parts._replace(query=query))


async def database_url(settings: Settings, *, embedded: bool) -> str:
    """DATABASE_URL (in the queue's schema, unless it is a pooler's); else, where allowed,
    the embedded server under LOCAL_DATA_DIR."""
    if settings.database_url:
        if behind_pooler(settings):
            return settings.database_url
        return in_schema(settings.database_url, settings.database_schema)
    if embedded:
        from app.devdb import local_database_url  # the embedded server is an optional extra
        return in_schema(await local_database_url(Path(settings.local_data_dir)), settings.database_schema)
    raise DatabaseNotConfigured("DATABASE_URL is not set")


def behind_pooler(settings: Settings) -> bool:
    """DATABASE_DIRECT_URL beside DATABASE_URL says DATABASE_URL is a transaction pooler."""
    return bool(settings.database_url and settings.database_direct_url)


async def direct_database_url(settings: Settings, *, embedded: bool) -> str:
    """Where what needs a session goes (migrations, the worker's LISTEN): DATABASE_DIRECT_URL,
    else the one database URL."""
    if settings.database_direct_url:
        return in_schema(settings.database_direct_url, settings.database_schema)
    return await database_url(settings, embedded=embedded)


def remaining_seconds(context: Any) -> float | None:
    """In Lambda, the seconds this invocation has left (None anywhere else, or when the
    context cannot say: the platform limit then bounds the run)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    try:
        seconds = float(remaining()) / 1000.0
    except Exception:  # not Lambda's own context; a run is still better than a crash
        return None
    return seconds if math.isfinite(seconds) else None


@dataclass(frozen=True)
class RunLimits:
    budget: float      # seconds to keep claiming
    hard_limit: float  # seconds after which no handler may still be running


def run_limits(settings: Settings, requested: float | None, remaining: float | None) -> RunLimits:
    """The one place a run's time is decided. The budget is the request (default
    PIPELINE_BUDGET_SECONDS) capped by that setting and, in Lambda, by the time left
    minus LAMBDA_SAFETY_MARGIN_SECONDS. Handlers are cut FINISH_MARGIN_SECONDS before
    the host would kill us (the platform limit, or Lambda's time left), so the run is
    always recorded."""
    s = settings
    budget = s.pipeline_budget_seconds if requested is None else min(requested, s.pipeline_budget_seconds)
    if remaining is None:
        hard_limit = s.platform_limit_seconds - s.finish_margin_seconds
    else:
        budget = min(budget, remaining - s.lambda_safety_margin_seconds)
        hard_limit = remaining - s.finish_margin_seconds
    hard_limit = max(0.0, hard_limit)
    return RunLimits(budget=max(0.0, min(budget, hard_limit)), hard_limit=hard_limit)


def run_json(row: Mapping[str, Any], budget_seconds: float | None = None) -> dict[str, Any]:
    """The one JSON shape of a run, from its runs row: GET /runs, GET /runs/{id},
    /cron/pipeline, the Lambda schedule and `run-once`. A run this process just made
    also says the claiming budget it had (budgetSeconds)."""
    started, finished = row["started_at"], row["finished_at"]
    body = {
        "id": str(row["id"]), "trigger": row["trigger"], "stopReason": row["stop_reason"],
        "jobsDone": row["jobs_done"], "jobsFailed": row["jobs_failed"], "jobsRetried": row["jobs_retried"],
        "jobsDeferred": row["jobs_deferred"], "quotaUnits": row["quota_units"],
        "summary": row["summary"], "error": row["error"],
        "startedAt": started.isoformat(), "finishedAt": finished.isoformat() if finished else None,
        "durationSeconds": round((finished - started).total_seconds(), 3) if finished else None,
    }
    if budget_seconds is not None:
        body["budgetSeconds"] = round(budget_seconds, 3)
    return body


def job_json(r: Mapping[str, Any]) -> dict[str, Any]:
    """A job, the same everywhere: the API's answers and the CLI's --json."""
    def text(value: Any) -> str | None:
        return str(value) if value is not None else None

    out = {
        "id": str(r["id"]), "type": r["type"], "status": r["status"], "payload": r["payload"],
        "dedupeKey": r["dedupe_key"], "attempts": r["attempts"], "runAfter": iso(r["run_after"]),
        "lockedAt": iso(r["locked_at"]), "lastError": r["last_error"], "runId": text(r["run_id"]),
        "batchId": text(r["batch_id"]), "lane": str(r["lane"]), "priority": r["priority"],
        "total": r["total"], "progress": r["progress"], "createdAt": iso(r["created_at"]), "finishedAt": iso(r["finished_at"]),
    }
    if "errors" in r.keys():  # one job shown; lists leave them out
        out["errors"] = r["errors"]
    if "parents" in r.keys():  # one job shown: what it waits for, and its result
        out["after"] = [str(p) for p in r["parents"]] if r["parents"] else None
        out["runAnyway"] = r["run_anyway"]
        out["result"] = r["result"]
    if "cancel_requested_at" in r.keys() and r["cancel_requested_at"] is not None:  # one job, or a cancel's answer
        out["cancelRequestedAt"] = iso(r["cancel_requested_at"])
    return out


def user_stages(stages: list[Stage]) -> list[Stage]:
    """The stages people run and control (not the pipeline's own housekeeping)."""
    return [s for s in stages if not s.internal]


def handled_types(stages: list[Stage]) -> list[str]:
    """The job types a pipeline of these stages runs: theirs and the pipeline's own."""
    return [*RESERVED_TYPES, *(s.type for s in stages if s.type not in RESERVED_TYPES)]


def configured_stages(settings: Settings, plugins: list[Plugin]) -> list[Stage]:
    """The plug-ins' stages, then PIPELINE_STAGES's (a stage named twice, as when
    PIPELINE_STAGES names a plug-in's own list, runs once)."""
    stages = plugin_stages(plugins)
    if settings.pipeline_stages:
        stages += [s for s in load_stages(settings.pipeline_stages) if not any(s is t for t in stages)]
    check_stages(stages, "PIPELINE_PLUGINS and PIPELINE_STAGES")
    return stages


class Runtime:
    """The composition root's product: the plug-ins and stages this deployment runs.

    stages: given by tests and embedders (create_app(stages=...)); default: the plug-ins'
    and PIPELINE_STAGES's. plugins: default PIPELINE_PLUGINS's.
    embedded_database: may an unset DATABASE_URL start the embedded server? Default:
    only in local dev mode (LOCAL_DEV); the CLI, a tool on your machine, always may."""

    def __init__(self, settings: Settings, stages: list[Stage] | None = None, *,
                 plugins: list[Plugin] | None = None, embedded_database: bool | None = None) -> None:
        self.settings = settings
        self.plugins = load_plugins(settings.pipeline_plugins) if plugins is None else list(plugins)
        if stages is None:
            stages = configured_stages(settings, self.plugins)
        else:
            check_stages(stages, "create_app(stages=...)")
        self.stages = stages
        self.embedded_database = settings.local_dev if embedded_database is None else embedded_database
        self._pool: asyncpg.Pool | None = None
        self._tenant_pool: asyncpg.Pool | None = None
        self._tenant_refused_until = 0.0
        self._lock: asyncio.Lock | None = None
        self.pools_created = 0

    async def dsn(self) -> str:
        return await database_url(self.settings, embedded=self.embedded_database)

    async def direct_dsn(self) -> str:
        return await direct_database_url(self.settings, embedded=self.embedded_database)

    async def pool(self) -> asyncpg.Pool:
        """The pool; DatabaseUnavailable (or DatabaseNotConfigured) when there is none."""
        with database_errors():
            return await self._open_pool()

    async def _open_pool(self) -> asyncpg.Pool:
        """The pool, opened on first use; the driver's own error when the server is away."""
        return await self._once("_pool", self._new_pool)

    async def _new_pool(self) -> asyncpg.Pool:
        pool = await create_pool(await self.dsn(), self.settings.db_pool_size, pooled=behind_pooler(self.settings))
        self.pools_created += 1
        return pool

    async def tenant_pool(self) -> asyncpg.Pool:
        """Where a tenant's API request runs: TENANT_DATABASE_URL's pool (its login checked
        on opening to be no more than skiplock_api: TenantLoginRefused otherwise), else the
        pool. Admin keys are the operator's and use the pool."""
        if not self.settings.tenant_database_url:
            return await self.pool()
        if time.monotonic() < self._tenant_refused_until:  # no connection per request meanwhile
            raise TenantLoginRefused(TENANT_REFUSED)
        with database_errors():
            return await self._once("_tenant_pool", self._new_tenant_pool)

    async def _new_tenant_pool(self) -> asyncpg.Pool:
        url = self.settings.tenant_database_url
        pooled = behind_pooler(self.settings)
        pool = await create_pool(url if pooled else in_schema(url, self.settings.database_schema),
                                 self.settings.db_pool_size, pooled=pooled)
        reasons = await pool.fetchval(*statement("tenant_login_check").bind())
        if reasons:
            await pool.close()
            self._tenant_refused_until = time.monotonic() + TENANT_RECHECK_SECONDS
            log.error("TENANT_DATABASE_URL's login %s; it must be a member of skiplock_api and of nothing "
                      "else (docs/deploy.md#database-roles)", ", ".join(reasons))
            raise TenantLoginRefused(TENANT_REFUSED)
        return pool

    async def _once(self, attr: str, make) -> asyncpg.Pool:
        """self.<attr>, made by `make` on first use (one maker at a time); a failure is
        not kept, so the next call tries again."""
        if getattr(self, attr) is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if getattr(self, attr) is None:
                    setattr(self, attr, await make())
        return getattr(self, attr)

    async def pool_when_up(self, within: float = OPEN_RETRY_SECONDS) -> asyncpg.Pool:
        """The pool, for a run or a worker: one started while the database restarts waits
        for it (as a runs row would, OPEN_RETRY_SECONDS at most, and never past `within`)
        rather than ending; a request (pool()) answers 503 at once."""
        deadline = time.monotonic() + min(OPEN_RETRY_SECONDS, within)
        with database_errors():
            return await retrying(self._open_pool, deadline, "connecting to the database")

    async def run(self, trigger: str, requested: float | None = None,
                  remaining: float | None = None, *,
                  stoppable: Callable[[Callable[[], None]], None] | None = None) -> RunResult:
        """One run of the stages. requested: the seconds asked for (None: the setting);
        remaining: Lambda's time left, read once by the caller (None: not in Lambda);
        stoppable: handed a function that stops the run as a worker stops (no new claims,
        in-flight jobs get WORKER_GRACE_SECONDS, then are deferred), e.g. on Ctrl-C."""
        limits = run_limits(self.settings, requested, remaining)
        asked_at = time.monotonic()
        pool = await self.pool_when_up(limits.hard_limit)
        if remaining is not None:  # Lambda's clock ran while we waited for the database, and
            # the run's start now: decided again, or it runs past the time left, row unwritten
            limits = run_limits(self.settings, requested, remaining - (time.monotonic() - asked_at))
        pipeline = Pipeline(pool, self.stages, self.settings)
        if stoppable is not None:
            stoppable(lambda: pipeline.stop(self.settings.worker_grace_seconds))
        with database_errors():  # the runs row could not even be written
            try:
                return await pipeline.run(trigger, budget=limits.budget, hard_limit=limits.hard_limit)
            except RunNotRecorded as exc:  # its message says which run and why
                raise DatabaseUnavailable(str(exc)) from exc

    async def close(self) -> None:
        for pool in (self._pool, self._tenant_pool):
            if pool is not None:
                await pool.close()
        self._pool = self._tenant_pool = None
