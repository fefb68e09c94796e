"""The trace context a job is enqueued in: the W3C traceparent of the enqueuer's current
OpenTelemetry span (an API request, a handler's span, any code of the app's), stored with
the job so that the job's span can link to it (app/pipeline/tracing.py).

OpenTelemetry is never imported here. A span can be current only once something has
imported opentelemetry.trace (the app, to set its tracer provider; FastAPI, for its own
request spans): until then there is no span to read, and an enqueue pays one dictionary
look-up. Without a tracer provider every span is an invalid one, and one more check says so."""

from __future__ import annotations

import sys


def current_traceparent() -> str | None:
    """The current span's traceparent ("00-<trace id>-<span id>-<flags>"), or None when no
    valid span is current (or OpenTelemetry is not loaded)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None  # no tracer provider set: even FastAPI's spans are invalid ones
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")
