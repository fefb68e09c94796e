"""Every request body is capped (MAX_BODY_BYTES): a longer one is a 413 in the one error
shape, and is never held in memory whole.

The cap is counted on the bytes as they stream in, not taken from Content-Length (a
chunked body has none, and a header is only a claim); a Content-Length over the cap is
refused before any of the body is read. The count sits in `receive`, so whoever reads
the body (the Idempotency layer, FastAPI) stops at the cap. The answer goes out at once;
what the client still sends is discarded by the server as it comes, never kept (the
connection is not cut, so that a client that writes its whole body first still reads
the 413 rather than a reset)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ApiError, WatchedSend, error_response


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "payload_too_large",
                         f"the request body is over {limit} bytes (MAX_BODY_BYTES); send less",
                         {"maxBodyBytes": limit})


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

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise too_large
            return message

        watched = WatchedSend(send)
        try:
            await self.app(scope, counted_receive, watched)
        except BodyTooLarge as exc:
            if watched.started:
                raise
            await self._refuse(exc, scope, send)

    @staticmethod
    async def _refuse(exc: BodyTooLarge, scope: Scope, send: Send) -> None:
        response = error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)
        await response(scope, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
