"""All configuration, from the environment (or a .env file), in one class."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Literal, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.whole_numbers import whole_number


SettingsClass = TypeVar("SettingsClass", bound=BaseSettings)
DSN_SHAPE = "postgresql://user:password@host:5432/database"
_ENCODE_HINT = " (in a user or password, write @ : / ? # as %40 %3A %2F %3F %23)"
_BRACKETED_HOST = re.compile(r"\[[^\]]+\](?::(.*))?$")  # [::1]:5432


class EnvFileSettings(BaseSettings):
    """Settings read from the environment and from .env in the current folder, or from the
    file SKIPLOCK_ENV_FILE names (empty: none; the test suite reads none, so a team's .env
    never reaches it)."""
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    def __init__(self, **values) -> None:
        if "SKIPLOCK_ENV_FILE" in os.environ and "_env_file" not in values:
            values["_env_file"] = os.environ["SKIPLOCK_ENV_FILE"] or None
        super().__init__(**values)


class SettingsError(Exception):
    """Configuration that cannot work; the message is one line a person can act on."""


# A secret whose HMACs or comparisons someone outside can watch (a tenant holds signed
# cursors and signed webhooks; anyone may try the cron route) must not be guessable offline.
SECRET_MIN_CHARS = 32


class Settings(EnvFileSettings):

    database_url: str | None = Field(
        None, description="PostgreSQL DSN (postgresql://user:password@host:5432/database, as asyncpg reads it); "
                          "unset: the local embedded server")
    database_direct_url: str | None = Field(
        None, description="a DSN straight to PostgreSQL, for what needs a session (migrations, the worker's "
                          "LISTEN); set it when DATABASE_URL is a transaction pooler (PgBouncer, RDS Proxy), "
                          "and DATABASE_URL is then used without session state")
    tenant_database_url: str | None = Field(
        None, description="a DSN for the API's tenant requests, as a login that is a member of skiplock_api and "
                          "of nothing else (docs/deploy.md#database-roles); unset: they run on DATABASE_URL's "
                          "login, dropping to skiplock_api for each transaction")
    database_schema: str = Field(
        "skiplock", pattern=r"^[a-z_][a-z0-9_]{0,62}$",
        description="the schema the queue's tables live in, beside your app's in public (a lowercase "
                    "name); migrate makes it, and moves a queue made before it from public "
                    "(docs/adopt.md#a-schema-of-its-own)")
    pipeline_plugins: str = Field(
        "app.outreach.plugin:PLUGIN",
        description="comma-separated module:NAME of the plug-ins to run (their stages, routes, commands); "
                    "empty: none")
    pipeline_stages: str = Field(
        "", description="module:NAME of your own ordered stage list, run after the plug-ins' stages")
    pipeline_budget_seconds: float = Field(220.0, gt=0, description="stop claiming after this long")
    platform_limit_seconds: float = Field(300.0, gt=0, description="the host kills the invocation here")
    finish_margin_seconds: float = Field(
        10.0, ge=0, description="kept free before the platform limit for recording the run")
    db_pool_size: int = Field(
        10, ge=2, le=200, description="asyncpg connections per process (at least 2: a run holds one and "
        "borrows another; at most half this many runs go at once in one process, the others wait)")
    pipeline_claim_streams: int = Field(
        2, ge=1, le=2,
        description="statements a run keeps in flight while it drains a backlog: 2 writes one batch's endings "
                    "and claims ahead on a second, pooled connection while the first is busy (still one batch's "
                    "handlers at a time); 1: one connection, one statement at a time")

    # Maintenance, notifications and the long-running worker.
    run_scheduler: bool = Field(
        True, description="this deployment enqueues the recurring maintenance ticks and the periodic "
        "stages' jobs (safe on several at once)")
    job_retention_hours: float = Field(168.0, gt=0, description="finished jobs older than this are pruned")
    audit_retention_days: int = Field(
        365, ge=0, le=36_500,
        description="audit log rows older than this many days are deleted by maintenance, in bounded "
                    "batches (docs/operations.md#audit-retention); 0: kept for ever")
    webhook_url: str | None = Field(None, description="where notifications go when the account has no URL of its own")
    webhook_secret: SecretStr | None = Field(
        None, description="signs webhook bodies, at least 32 characters (a shorter one is refused at start); "
                          "unset or blank: no notifications")
    worker_poll_seconds: float = Field(5.0, gt=0, description="a waiting worker looks for due work this often")
    worker_grace_seconds: float = Field(
        20.0, ge=0, description="on SIGTERM, in-flight jobs get this long before they are deferred")

    # Serving: the HTTP endpoint, the Lambda entry point and `make run`.
    cron_secret: SecretStr | None = Field(
        None, description="bearer token /cron/pipeline requires, at least 32 characters (a shorter one is "
                          "refused at start); unset: the route answers 503 (but see LOCAL_DEV)")
    metrics_token: SecretStr | None = Field(
        None, description="bearer token GET /metrics accepts besides an admin API key, at least 32 characters "
                          "(a shorter one is refused at start); unset or blank: admin keys only")
    local_dev: bool = Field(
        False, description="local dev mode: without CRON_SECRET the cron route is open, and an unset "
                           "DATABASE_URL starts the embedded server")
    lambda_safety_margin_seconds: float = Field(
        60.0, ge=0, description="in Lambda, the budget is at most the remaining time minus this")
    local_tick_seconds: float = Field(
        300.0, ge=0, description="`make run` runs the pipeline this often, like the schedule; 0: never")
    local_data_dir: str = Field(
        ".data", description="`make run` and commands without DATABASE_URL: where the embedded PostgreSQL keeps its "
                             "data (a folder; not empty)")
    local_host: str = Field("127.0.0.1", description="`make run`: the address uvicorn listens on")
    local_port: int = Field(8000, ge=1, le=65535, description="`make run`: the port uvicorn listens on")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="JSON log lines at this level and above")

    # The HTTP API's manners: pages, Idempotency-Key, and the optional Redis.
    api_docs: bool = Field(
        True, description="serve /docs (Swagger UI) and /redoc (ReDoc), their scripts from the pinned fastapi-offline "
                          "package under the dashboard's strict CSP; off: both answer 404 (/openapi.json stays)")
    page_size_default: int = Field(50, ge=1, le=1000, description="list routes: rows per page without ?limit")
    page_size_max: int = Field(200, ge=1, le=1000, description="list routes: the largest ?limit accepted")
    cursor_secret: SecretStr | None = Field(
        None, description="signs the opaque page cursors, at least 32 characters, shared by every process that "
                          "serves the API; unset: a key drawn at random by each process (`make run` keeps one "
                          "in its data folder), so a cursor made by another process is a 400. Never derived "
                          "from another secret")
    idempotency_retention_hours: float = Field(
        24.0, gt=0, description="stored answers to Idempotency-Key requests are forgotten after this long")
    idempotency_wait_seconds: float = Field(
        5.0, ge=0, description="a request whose key is still in progress waits this long for the first "
                               "answer before it gets 409 idempotency_in_progress")
    redis_url: str | None = Field(
        None, description="redis://host:port/db for rate limits and a short read cache; unset: neither")
    redis_timeout_seconds: float = Field(
        0.25, gt=0, le=10, description="every Redis call gives up after this long and the request goes on")
    rate_limit_per_minute: int = Field(
        600, ge=0, description="requests per client per minute on the API (needs REDIS_URL; 0: no limit)")
    trigger_rate_limit_per_minute: int = Field(
        12, ge=0, description="calls per client per minute to /cron/pipeline (needs REDIS_URL; 0: no limit)")
    cache_seconds: float = Field(
        2.0, ge=0, description="read routes are cached in Redis this long (needs REDIS_URL; 0: no cache)")
    tenant_requests_in_flight: int = Field(
        4, ge=1, le=200,
        description="one tenant (an API key's owner; admin keys aside) has at most this many requests holding "
                    "a database connection at once in one serving process; its others wait their turn without "
                    "one, so one tenant's slow reads cannot take every pooled connection from the others")
    tenant_statement_timeout_seconds: float = Field(
        5.0, ge=0, le=300,
        description="a tenant key's request (admin keys aside) has each SQL statement cancelled after this long, "
                    "lock waits included, and answers 503 statement_timeout; set transaction-locally, so safe behind "
                    "a transaction pooler (0: none set here; a limit on the role or database still holds)")
    tenant_waiting_jobs_max: int = Field(
        100_000, ge=0,
        description="a tenant's key may enqueue (POST /jobs) or retry while fewer jobs than this wait in its lanes; "
                    "past it, 429 waiting_jobs_limit until some run (0: no limit). Admin keys and the "
                    "pipeline's own enqueues are not counted")
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=100_000_000,
        description="a request body longer than this is refused with 413 while it streams in")
    json_max_values: int = Field(
        10_000, ge=100, le=10_000_000,
        description="a JSON request body with more values than this (keys, strings, numbers, arrays, objects) is "
                    "refused with 413 body_too_complex before it is parsed: parsing and validating cost the "
                    "event loop per value, not per byte")
    json_max_object_keys: int = Field(
        1_000, ge=10, le=10_000_000,
        description="a JSON request body with an object of more keys than this is refused with 413 "
                    "body_too_complex before it is parsed (each unknown key would be one validation error)")
    request_body_timeout_seconds: float = Field(
        10.0, gt=0, le=600,
        description="a request's body must arrive within this long of its headers; else 408 request_timeout "
                    "and the connection is closed (a slow client holds no request open)")
    request_header_timeout_seconds: float = Field(
        10.0, gt=0, le=600,
        description="`skiplock serve` and `make run`: a connection that has not sent a request's complete "
                    "headers this long after connecting (or after its previous answer) is closed")
    unfinished_connections_max: int = Field(
        200, ge=1, le=100_000,
        description="`skiplock serve` and `make run`: at most this many connections may be sending a request's "
                    "headers or body at once in the process; past it the oldest is closed, so slow clients "
                    "cannot take every socket")
    max_payload_bytes: int = Field(
        65_536, ge=256, le=100_000_000,
        description="a job payload (as compact JSON) larger than this is refused with 422 at enqueue")
    events_replay: int = Field(
        1000, ge=1, le=1_000_000,
        description="live events: only a room's last this many are replayed; asking for older gets a gap "
                    "(maintenance prunes the rest)")
    events_subscriber_queue: int = Field(
        256, ge=1, le=100_000,
        description="live events: a WebSocket's undelivered events held in memory; a client that falls "
                    "further behind catches up from the database, or gets a gap")

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value):
        return value.upper() if isinstance(value, str) else value

    @field_validator("cron_secret", "cursor_secret", "metrics_token", "webhook_secret", "redis_url",
                     "database_direct_url", "tenant_database_url", mode="before")
    @classmethod
    def _blank_secret_is_unset(cls, value):
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("cron_secret", "cursor_secret", "metrics_token", "webhook_secret")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        """A short secret is refused, in one line that says how to make a good one: the
        red team found a cron secret from a signed cursor with a 200,000-word list in 0.48 s."""
        if value is not None and len(value.get_secret_value().strip()) < SECRET_MIN_CHARS:
            raise ValueError(f"is {len(value.get_secret_value().strip())} characters; a secret needs at least "
                             f"{SECRET_MIN_CHARS} (make one with: openssl rand -base64 32)")
        return value

    @field_validator("database_url", "database_direct_url", "tenant_database_url")
    @classmethod
    def _dsn_parses(cls, value: str | None) -> str | None:
        if value:
            check_dsn(value)
        return value

    @field_validator("local_data_dir")
    @classmethod
    def _names_a_folder(cls, value: str) -> str:
        if not value.strip():  # Path("") is the working directory, which the server would take over
            raise ValueError("is empty; name a folder for the embedded PostgreSQL's data (default .data)")
        return value

    @model_validator(mode="after")
    def _direct_url_beside_pooled(self) -> "Settings":
        if self.database_direct_url and not self.database_url:
            raise ValueError("DATABASE_DIRECT_URL is set but DATABASE_URL is not: set both (DATABASE_URL "
                             "the pooler's, DATABASE_DIRECT_URL PostgreSQL's own) or neither")
        if self.tenant_database_url and not self.database_url:
            raise ValueError("TENANT_DATABASE_URL is set but DATABASE_URL is not: the tenant login serves "
                             "beside the tables' owner, never instead of it")
        return self

    @model_validator(mode="after")
    def _budget_fits(self) -> "Settings":
        if self.pipeline_budget_seconds + self.finish_margin_seconds > self.platform_limit_seconds:
            raise ValueError(
                "PIPELINE_BUDGET_SECONDS plus FINISH_MARGIN_SECONDS must fit inside PLATFORM_LIMIT_SECONDS")
        if self.pipeline_stages and ":" not in self.pipeline_stages:
            raise ValueError("PIPELINE_STAGES must look like package.module:NAME")
        return self

    # Egress: the non-public places outbound requests (webhooks, a plug-in's fetches) may reach.
    fetch_allow_private: str = Field(
        "", pattern=r"^\s*([^,\s]+:\d+)?\s*(,\s*([^,\s]+:\d+)?\s*)*$",
        description="comma-separated host:port pairs that fetches and webhooks may reach although "
                    "they are not public (e.g. 127.0.0.1:8000); everything else non-public is refused")

    @model_validator(mode="after")
    def _api_fits(self) -> "Settings":
        if self.page_size_default > self.page_size_max:
            raise ValueError("PAGE_SIZE_DEFAULT cannot be larger than PAGE_SIZE_MAX")
        if self.redis_url and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("REDIS_URL must look like redis://127.0.0.1:6379/0")
        if self.max_payload_bytes > self.max_body_bytes:
            raise ValueError("MAX_PAYLOAD_BYTES cannot be larger than MAX_BODY_BYTES")
        return self


def check_dsn(dsn: str) -> None:
    """ValueError unless asyncpg can parse `dsn`: its scheme, hosts, ports and query, as
    asyncpg reads them (several hosts, a socket folder in ?host=, percent-encoding). Never
    names any part of the URL: a password with a / ? or # in it is read as the port or
    the query, and the message would print it."""
    try:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query, strict_parsing=True) if parts.query else {}
    except ValueError:  # an unclosed [ of an IPv6 host, a query that is not key=value
        raise ValueError(f"is not a URL like {DSN_SHAPE}{_ENCODE_HINT}") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"must start with postgresql:// or postgres://, like {DSN_SHAPE}")
    ports = [p for value in query.get("port", []) for p in value.split(",")]
    hosts = parts.netloc.partition("@")[2] if "@" in parts.netloc else parts.netloc  # asyncpg splits at the first
    if "@" in hosts:
        raise ValueError("has a second '@': write one in the user or password as %40")
    for host in hosts.split(",") if hosts else []:
        bracketed = _BRACKETED_HOST.match(host)
        if bracketed:
            ports.append(bracketed.group(1) or "")
        elif host.startswith("[") or not host:
            raise ValueError(f"has a host it cannot read; hosts look like {DSN_SHAPE}{_ENCODE_HINT}")
        else:
            ports.append(unquote(host.partition(":")[2]))
    for port in ports:
        if port and not 1 <= (whole_number(port, max_digits=5) or 0) <= 65535:
            raise ValueError(f"has a port that is not a number from 1 to 65535{_ENCODE_HINT}")


def load_settings(**overrides) -> Settings:
    return load_settings_class(Settings, **overrides)


def load_settings_class(cls: type[SettingsClass], **overrides) -> SettingsClass:
    """`cls` from the environment with `overrides` (a plug-in's settings class too);
    SettingsError with one line naming the variable when a value does not fit."""
    try:
        settings = cls(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SettingsError(f"bad setting {where.upper()}: {message}" if where
                            else f"bad settings: {message}") from None
    except UnicodeDecodeError as exc:  # only the .env file is decoded here; the environment is text already
        raise SettingsError(f"{cls.model_config.get('env_file')} is not UTF-8 text (byte "
                            f"{exc.object[exc.start]:#x} at position {exc.start}): save it as UTF-8") from None
    for name, value in settings:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and not is_utf8(text):  # undecodable bytes in the environment
            raise SettingsError(f"bad setting {name.upper()}: is not UTF-8 text")
    return settings


def is_utf8(text: str) -> bool:
    """False for text with lone surrogates: the bytes Python could not decode (argv, the environment)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@lru_cache
def get_settings() -> Settings:
    return load_settings()
