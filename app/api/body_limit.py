"""Every request body is capped in size (MAX_BODY_BYTES): a longer one is a 413 in the one
error shape, and is never held in memory whole. And in time (REQUEST_BODY_TIMEOUT_SECONDS
from the headers): a body still arriving then is a 408 request_timeout with `Connection:
close` (a POST declaring 1,000 bytes and sending 1 had held its request for ever).

The cap is counted on the bytes as they stream in, not taken from Content-Length (a
chunked body has none, and a header is only a claim); a Content-Length over the cap is
refused before any of the body is read. The count sits in `receive`, so whoever reads
the body (the Idempotency layer, FastAPI) stops at the cap. The answer goes out at once;
what the client still sends is discarded by the server as it comes, never kept (the
connection is not cut, so that a client that writes its whole body first still reads
the 413 rather than a reset)."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ApiError, WatchedSend, error_response


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "payload_too_large",
                         f"the request body is over {limit} bytes (MAX_BODY_BYTES); send less",
                         {"maxBodyBytes": limit})


class BodyTimeout(ApiError):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, "request_timeout",
                         f"the request body did not arrive within {seconds:g} s of its headers "
                         "(REQUEST_BODY_TIMEOUT_SECONDS); send it again, all at once", {"timeoutSeconds": seconds},
                         headers={"Connection": "close"})


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """Pure ASGI middleware, just inside the JSON 500 catch-all."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = BodyTooLarge(self.max_bytes)
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(too_large, scope, send)
            return
        seen = 0
        complete = False
        deadline = None if self.timeout is None else asyncio.get_running_loop().time() + self.timeout

        async def counted_receive() -> Message:
            nonlocal seen, complete
            if complete or deadline is None:  # after the body: a wait for the disconnect, unbounded
                message = await receive()
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    raise BodyTimeout(self.timeout) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise too_large
                complete = not message.get("more_body", False)
            return message

        watched = WatchedSend(send)
        try:
            await self.app(scope, counted_receive, watched)
        except (BodyTooLarge, BodyTimeout) as exc:
            if watched.started:
                raise
            await self._refuse(exc, scope, send)

    @staticmethod
    async def _refuse(exc: ApiError, scope: Scope, send: Send) -> None:
        response = error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)
        await response(scope, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
