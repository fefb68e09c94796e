"""Serving the API on a socket: `skiplock serve` and `make run` (uvicorn), with what a
server that faces its clients directly needs against slow ones.

uvicorn waits for ever on a connection that has not finished its request's headers (150
connections sending a header line every 10 s were all held after 70 s), and the app waited
for ever on a body that never comes (a 1,000-byte Content-Length and 1 byte of body). So:

- a connection must finish each request's headers within REQUEST_HEADER_TIMEOUT_SECONDS
  of connecting or of its previous answer, or it is closed (GuardedHTTP, below);
- a body must arrive within REQUEST_BODY_TIMEOUT_SECONDS of its headers, or the answer is
  408 request_timeout and the connection is closed (app/api/body_limit.py, in the app, so
  plain uvicorn and a mounted app get it too);
- at most UNFINISHED_CONNECTIONS_MAX connections may be in either state at once; past it
  the oldest is closed, so a flood of slow connections cannot take the process's sockets
  and file descriptors from everyone else, and a client that sends its request at once is
  never the oldest for long.

    uvicorn_config(app, settings, host=..., port=...)   what `skiplock serve` and `make run` run
    uvicorn ... --http app.serving:GuardedHTTP           the same guard under plain uvicorn

Behind a proxy, the proxy's own limits come first (docs/deploy.md#slow-clients)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from app.api.events import WS_MAX_MESSAGE_BYTES
from app.settings import Settings, get_settings

log = logging.getLogger("skiplock.serving")


@dataclass(frozen=True)
class Limits:
    header_seconds: float
    most_unfinished: int

    @classmethod
    def of(cls, settings: Settings) -> "Limits":
        return cls(settings.request_header_timeout_seconds, settings.unfinished_connections_max)


def _limits(config: uvicorn.Config) -> Limits:
    """The limits of the app this config serves (its settings), else of the environment."""
    found = getattr(config, "_skiplock_limits", None)
    if found is None:
        app, settings = config.loaded_app, None
        for _ in range(10):  # through uvicorn's wrappers (proxy headers, ...) to ours
            runtime = getattr(getattr(app, "state", None), "runtime", None)
            if runtime is not None:
                settings = runtime.settings
                break
            app = getattr(app, "app", None)
        found = Limits.of(settings or get_settings())
        config._skiplock_limits = found  # type: ignore[attr-defined]
    return found


class _Unfinished:
    """One server's connections that are still sending a request's headers or body,
    oldest first."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.connections: dict["GuardedHTTP", None] = {}

    def add(self, connection: "GuardedHTTP") -> None:
        self.connections.pop(connection, None)
        self.connections[connection] = None
        while len(self.connections) > self.most:
            oldest = next(iter(self.connections))
            oldest.cut("too many connections were sending their request at once; the oldest is closed")

    def discard(self, connection: "GuardedHTTP") -> None:
        self.connections.pop(connection, None)


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class GuardedHTTP(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol with a deadline on each request's headers and a cap on the
    connections that have not finished their request. Only the asyncio Protocol methods
    and the `app` uvicorn calls are touched."""

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: Any, _loop=None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = _limits(config)
        self._header_seconds = limits.header_seconds
        unfinished = getattr(server_state, "_skiplock_unfinished", None)
        if unfinished is None:
            unfinished = server_state._skiplock_unfinished = _Unfinished(limits.most_unfinished)
        self._unfinished: _Unfinished = unfinished
        self._deadline: asyncio.TimerHandle | None = None
        self.app = self._guarded(self.app)

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.get_protocol() is not self:  # upgraded to a WebSocket: its own rules
            self._finished()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finished()
        super().connection_lost(exc)

    # -- the guard ---------------------------------------------------------------------
    def _await_headers(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self._stop_clock()
        self._deadline = self.loop.call_later(
            self._header_seconds, self.cut,
            f"no complete request headers within {self._header_seconds:g} s (REQUEST_HEADER_TIMEOUT_SECONDS)")
        self._unfinished.add(self)

    def _stop_clock(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _finished(self) -> None:
        self._stop_clock()
        self._unfinished.discard(self)

    def cut(self, why: str) -> None:
        self._finished()
        if self.transport is not None and not self.transport.is_closing():
            log.info("closed a connection from %s: %s", "%s:%s" % self.client if self.client else "?", why)
            self.transport.close()

    def _guarded(self, inner):
        async def app(scope, receive, send):
            self._stop_clock()  # the headers are in
            if scope.get("type") != "http" or not _has_body(scope):
                self._finished()

            async def body_receive():
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    self._finished()  # the body is in (or the client left)
                return message

            async def answer_send(message):
                if message["type"] == "http.response.start":
                    self._finished()  # answering: the request is the app's now (a 408, say)
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    self._await_headers()  # the next request on this connection has the same deadline
            await inner(scope, body_receive, answer_send)
        return app


def uvicorn_config(app, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn serving `app` as `skiplock serve` and `make run` do: the guard above, small
    WebSocket frames for a client that has not shown its key yet, our JSON logging."""
    return uvicorn.Config(app, http=GuardedHTTP, log_config=None, lifespan="on", access_log=True,
                          ws_max_size=WS_MAX_MESSAGE_BYTES,  # not 16 MiB per frame for a keyless client
                          **options)


async def serve(settings: Settings, host: str, port: int) -> None:
    """`skiplock serve`: the API on host:port until SIGINT or SIGTERM."""
    from app.api.main import create_app

    server = uvicorn.Server(uvicorn_config(create_app(settings), settings, host=host, port=port))
    await server.serve()
