"""One error shape for every answer that is not a success:

    {"error": {"code": "unauthorized", "message": "a sentence a person can act on", "details": ...}}

Bad input is a 4xx with this shape; an unexpected exception is a 500 with this shape
and a generic message (the traceback goes to the log, never to the client)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from app.engine.db import was_cut
from app.json_values import error_body
from app.pipeline.outcomes import HookFailed
from app.runtime import DatabaseUnavailable

log = logging.getLogger("skiplock.api")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


class ApiError(StarletteHTTPException):
    """Raise from a route: becomes {"error": {code, message, details}} with `status`."""

    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=message, headers=headers)
        self.code = code
        self.message = message
        self.details = details


class ErrorJSON(JSONResponse):
    """Escaped to ASCII: an error may quote what the client sent, and text that is not
    UTF-8 (a lone surrogate) must not turn the answer into a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def error_response(status: int, code: str, message: str, details: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return ErrorJSON(error_body(code, message, details), status_code=status, headers=headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc, ApiError):
        return error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)
    message = exc.detail if isinstance(exc.detail, str) else _CODES.get(exc.status_code, "error")
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    code = _CODES.get(exc.status_code, "error")
    return error_response(exc.status_code, code, message, None, getattr(exc, "headers", None))


def _where(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("query", "path", "header", "body", "cookie"):
        kind, rest = parts[0], parts[1:]
        return f"{kind} parameter {'.'.join(rest)!r}" if rest else kind
    return ".".join(parts) or "request"


# A 422 names at most this many problems: 60,001 of them (one per unknown key) made a
# megabyte of answer out of a megabyte of request.
MAX_PROBLEMS = 20


def invalid_request(problems: list[tuple[tuple, str]]) -> ApiError:
    """422 invalid_request listing (location, message) problems, like FastAPI's own (the
    first MAX_PROBLEMS)."""
    details = [{"location": ".".join(str(p) for p in loc), "message": msg} for loc, msg in problems[:MAX_PROBLEMS]]
    loc, msg = problems[0] if problems else ((), "invalid")
    return ApiError(422, "invalid_request", f"{_where(tuple(loc))}: {msg}", details)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    error = invalid_request([(tuple(e.get("loc", ())), e.get("msg", "invalid")) for e in exc.errors()[:MAX_PROBLEMS]])
    return error_response(422, error.code, error.message, error.details)


# The database went away in the middle of a request: a 503 the client may retry, not a 500.
# (Shutdown and crash are what a query running during `pg_ctl restart` gets back.)
DATABASE_GONE = (ConnectionError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError,
                 asyncpg.AdminShutdownError, asyncpg.CrashShutdownError, asyncpg.TooManyConnectionsError)


def database_gone(exc: BaseException) -> bool:
    """Whether `exc` means "the database is not there" (answer 503), not a bug (500): the
    errors above, or the driver saying only that the connection was cut (engine/db.py)."""
    return isinstance(exc, (DatabaseUnavailable, *DATABASE_GONE)) or was_cut(exc)


def database_unavailable_response(exc: Exception) -> JSONResponse:
    """The one 503 for "the database is not there": the runtime's DatabaseUnavailable (no
    pool, not configured, a run that could not be recorded) or a connection lost mid-request."""
    if isinstance(exc, DatabaseUnavailable):
        return error_response(503, exc.code, str(exc))
    return error_response(503, "database_unavailable",
                          f"the database connection failed ({type(exc).__name__}); try again shortly")


async def _database_gone(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    return database_unavailable_response(exc)


async def _driver_error(request: Request, exc: Exception) -> JSONResponse:
    """asyncpg's own errors: 503 when they only say the connection was cut, else a 500."""
    if database_gone(exc):
        return await _database_gone(request, exc)
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "unexpected server error; the details are in the server log")


async def _hook_failed(request: Request, exc: Exception) -> JSONResponse:
    """A stage's hook raised while a job was ending: that ending was rolled back."""
    log.error("%s on %s %s", exc, request.method, request.url.path, exc_info=exc)
    return error_response(500, "hook_failed", f"{exc.public_message}; nothing was changed, so the request "
                                              "may be sent again (the details are in the server log)")


class WatchedSend:
    """`send`, remembering whether the response has started: after that, an error can
    no longer be answered in the error shape."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


class CatchAll:
    """Pure ASGI middleware: an exception nothing else handled becomes a JSON 500.

    (Starlette's own last-resort handler answers in plain text and re-raises.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        watched = WatchedSend(send)
        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            gone = database_gone(exc)  # raised by a middleware, outside the routes' handlers
            if gone:
                log.warning("database unavailable on %s %s: %s", scope.get("method"), scope.get("path"), exc)
            else:
                log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if watched.started:
                return  # too late to answer; the client sees a cut response
            response = database_unavailable_response(exc) if gone else error_response(
                500, "internal_error", "unexpected server error; the details are in the server log")
            await response(scope, receive, send)


async def _statement_cancelled(request: Request, exc: Exception) -> JSONResponse:
    """PostgreSQL cancelled a statement: it ran past a tenant key's
    TENANT_STATEMENT_TIMEOUT_SECONDS (a lock wait counts), or an operator cancelled it.
    The request's transaction was rolled back; a retry may find the lock gone or the
    database less busy, so 503 with Retry-After, not a 500."""
    seconds = request.app.state.runtime.settings.tenant_statement_timeout_seconds
    log.warning("statement cancelled on %s %s: %s", request.method, request.url.path, exc)
    return error_response(503, "statement_timeout", statement_timeout_message(seconds, "request"),
                          headers={"Retry-After": str(max(1, math.ceil(seconds)))})


def statement_timeout_message(seconds: float, what: str) -> str:
    """The one sentence for a statement PostgreSQL cancelled, a request's or a stream's."""
    limit = f" (the limit is {seconds:g} s a statement)" if seconds else ""
    return (f"the database cancelled this {what}'s work before it finished{limit}; it was "
            "rolled back, so nothing changed: try again shortly, or ask for less at once")


async def _not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """Row-level security refused a write (a row of another tenant, or ownerless work
    for a tenant key): the key may not do this."""
    return error_response(403, "forbidden", "this API key may not change that: it belongs to another "
                                            "account, or only an admin key may")


def install(app: FastAPI) -> None:
    app.add_exception_handler(asyncpg.InsufficientPrivilegeError, _not_allowed)
    app.add_exception_handler(asyncpg.QueryCanceledError, _statement_cancelled)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    for exc_class in (DatabaseUnavailable, *DATABASE_GONE):
        app.add_exception_handler(exc_class, _database_gone)
    for exc_class in (asyncpg.InternalClientError, asyncpg.InterfaceError):
        app.add_exception_handler(exc_class, _driver_error)
    app.add_exception_handler(HookFailed, _hook_failed)
    app.add_middleware(CatchAll)
