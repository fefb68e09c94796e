"""The AWS Lambda entry point: `app.lambda_handler.handler`.

- HTTP events (a Function URL, API Gateway v2): Mangum, over the same FastAPI app.
- The EventBridge schedule ({"source": "aws.events", "detail-type": "Scheduled
  Event"}), which Mangum cannot handle: the pipeline directly, trigger "cron".

Importing this module costs almost nothing: a cold start pays for what its event needs,
on the first invocation. The schedule needs the runtime (settings, stages, the pool); the
FastAPI app and Mangum are imported and built only when the first HTTP event comes
(bench/coldstart.py measures both). Warm invocations reuse them, the runtime's asyncpg
pool and one event loop. Mangum runs with lifespan="off", because with lifespan on it
would run startup and shutdown (and so open and close the pool) on every invocation.

The budget is min(the configured budget, the invocation's remaining time minus
LAMBDA_SAFETY_MARGIN_SECONDS); handlers are cut at the remaining time minus
FINISH_MARGIN_SECONDS, so the run is always recorded before Lambda kills us (both
decided by app.runtime.run_limits, the same for the HTTP route).
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # imported when first needed: see the module's docstring
    from app.pipeline.stage import Stage
    from app.settings import Settings

log = logging.getLogger("skiplock.lambda")


def is_scheduled_event(event: Any) -> bool:
    return (isinstance(event, dict) and event.get("source") == "aws.events"
            and event.get("detail-type") == "Scheduled Event")


@contextmanager
def _current_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Make `loop` the thread's current loop (Mangum uses get_event_loop()), then put back
    whatever was there."""
    policy = asyncio.get_event_loop_policy()
    previous = getattr(getattr(policy, "_local", None), "_loop", None)
    policy.set_event_loop(loop)
    try:
        yield
    finally:
        policy.set_event_loop(previous)


class LambdaApp:
    """One warm Lambda container's worth of state, callable as a handler."""

    def __init__(self, settings: Settings | None = None, stages: list[Stage] | None = None) -> None:
        from app.runtime import Runtime
        from app.settings import get_settings

        self.runtime = Runtime(settings or get_settings(), stages)
        self.loop = asyncio.new_event_loop()
        self._mangum = None

    @property
    def mangum(self):
        """Mangum over the FastAPI app, sharing this container's runtime (and so its pool);
        built on the first HTTP event."""
        if self._mangum is None:
            from mangum import Mangum

            from app.api.main import create_app

            app = create_app(runtime=self.runtime)
            with _current_loop(self.loop):
                self._mangum = Mangum(app, lifespan="off")
        return self._mangum

    @property
    def app(self):
        return self.mangum.app

    def __call__(self, event: dict, context: Any) -> dict:
        with _current_loop(self.loop):
            if is_scheduled_event(event):
                return self.loop.run_until_complete(self.scheduled(event, context))
            try:
                return self.mangum(event, context)
            except Exception as exc:  # Mangum's own refusal: not an HTTP event it can read
                # (the app's errors never get here: they are answered inside it)
                log.error("refused an event that is neither the schedule nor HTTP: %s: %s",
                          type(exc).__name__, str(exc)[:200])
                return _refusal(400, "unsupported_event",
                                "this function takes the EventBridge schedule and HTTP events "
                                "(a Function URL, API Gateway, ALB)")

    async def scheduled(self, event: dict, context: Any) -> dict:
        """The five-minute schedule: run once; a failed run is logged, not raised (raising
        would make Lambda retry the async invocation, and the next tick comes anyway)."""
        from app.runtime import DatabaseUnavailable, remaining_seconds, run_json

        try:
            result = await self.runtime.run("cron", remaining=remaining_seconds(context))
        except DatabaseUnavailable as exc:  # not even a runs row could be written
            log.error("scheduled run not made: %s", exc)
            return _refusal(503, exc.code, str(exc))
        body = run_json(result.row, result.budget_seconds)
        if result.stop_reason == "error":
            log.error("scheduled run %s stopped on an error: %s", result.run_id, result.error)
        return body


def _refusal(status: int, code: str, message: str) -> dict:
    """The API's one error shape, as an HTTP answer a Function URL or API Gateway can
    return (and a plain result for any other invoker)."""
    from app.json_values import error_body

    return {"statusCode": status, "headers": {"content-type": "application/json"},
            "body": json.dumps(error_body(code, message))}


_instance: LambdaApp | None = None


def handler(event: dict, context: Any) -> dict:
    global _instance
    if _instance is None:
        from app.logs import configure_logging
        from app.settings import get_settings

        settings = get_settings()
        configure_logging(settings.log_level)
        _instance = LambdaApp(settings)
    return _instance(event, context)
