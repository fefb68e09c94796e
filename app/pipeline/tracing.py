"""Traces, for a team that runs OpenTelemetry: a run is a span, and each job it runs a
child span with the job's type, lane, attempt and outcome (done, retried, failed,
deferred, cancelled: docs/queue.md#words), a failure's error recorded on it. A job's span links to
the span that enqueued it (the trace context stored with the job, app/engine/trace_context.py).

A link, not a parent: the enqueuing request ended long before the job ran (seconds, or
days for a due-time job), each retry runs in another run, and a batch holds jobs many
requests enqueued. A span has one parent, and the job's is the run that ran it; the link
leads from the job to the request (and back), and keeps the request's trace as long as
the request was.

Skiplock configures nothing: it uses the global tracer provider the app sets. Nothing
here imports opentelemetry: a run asks once whether a provider is set, of the module the
app (or FastAPI) loaded (RunTrace.start), and without one the loop checks one `is None`
per job."""

from __future__ import annotations

import sys
from typing import Any, Awaitable

from app.engine.jobs import Job
from app.pipeline.outcomes import BatchEndings
from app.pipeline.stage import Stage


def _trace_api():
    """opentelemetry.trace when something has loaded it, else None (then no provider is set)."""
    return sys.modules.get("opentelemetry.trace")


class RunTrace:
    """One run's span, current while the run goes on, and the factory of its jobs' spans."""

    def __init__(self, trace, tracer, span) -> None:
        self._trace, self._tracer, self.span = trace, tracer, span
        self._parent = trace.set_span_in_context(span)

    @classmethod
    def start(cls, trigger: str) -> RunTrace | None:
        """The run's span, started; None when the app has set no tracer provider."""
        trace = _trace_api()
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
        tracer = provider.get_tracer("skiplock")
        return cls(trace, tracer, tracer.start_span("skiplock run", attributes={"skiplock.run.trigger": trigger}))

    async def around(self, run: Awaitable[Any]) -> Any:
        """Await the run (a RunResult) with its span current; the span ends with it, the
        runs row's id, reason and counts set on it (or the exception that stopped it)."""
        with self._trace.use_span(self.span, end_on_exit=True):
            result = await run
            span = self.span
            span.set_attributes({"skiplock.run.id": str(result.run_id),
                                 "skiplock.run.stop_reason": result.stop_reason,
                                 "skiplock.run.jobs_done": result.jobs_done,
                                 "skiplock.run.jobs_retried": result.jobs_retried,
                                 "skiplock.run.jobs_failed": result.jobs_failed,
                                 "skiplock.run.jobs_deferred": result.jobs_deferred})
            if result.error is not None:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, result.error))
            return result

    async def one(self, stage: Stage, job: Job, out: BatchEndings, call: Awaitable[None]) -> None:
        """Await `call`, which runs one job's handler and records its ending in `out`, in
        the job's span, current meanwhile: what the handler does (its HTTP calls, the jobs
        it enqueues) belongs to the job's trace."""
        span = self._job_span(stage, job)
        try:
            with self._trace.use_span(span):
                await call
        finally:
            self._end(span, stage, job, out, None)

    async def batch(self, stage: Stage, jobs: list[Job], out: BatchEndings, call: Awaitable[None]) -> None:
        """Await `call`, which runs a batch handler on `jobs` and records their endings in
        `out`, with a span per job; the run's span stays current (there is no one job's)."""
        spans = [self._job_span(stage, job) for job in jobs]
        try:
            await call
        finally:
            done = set(out.done)
            for span, job in zip(spans, jobs):
                self._end(span, stage, job, out, done)

    def _job_span(self, stage: Stage, job: Job):
        """A child of the run's span, linked to the span that enqueued the job when one did."""
        return self._tracer.start_span(
            f"skiplock job {job.type}", context=self._parent, kind=self._trace.SpanKind.CONSUMER,
            links=self._enqueued_by(job.trace_context),
            attributes={"skiplock.job.id": str(job.id), "skiplock.job.type": job.type,
                        "skiplock.job.lane": str(job.lane), "skiplock.job.attempt": job.attempts})

    def _enqueued_by(self, traceparent: str | None) -> list:
        if traceparent is None:
            return []
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        # what a plain SQL enqueue wrote may be anything: a malformed one links nothing
        enqueuer = self._trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
        span_context = enqueuer.get_span_context()
        return [self._trace.Link(span_context)] if span_context.is_valid else []

    def _end(self, span, stage: Stage, job: Job, out: BatchEndings, done: set | None) -> None:
        """End a job's span with its outcome as `out` has it (none when it has none: the run
        was cancelled under it); a failure's error text is the span's error."""
        outcome, error = _outcome(out, stage, job, done)
        if outcome is not None:
            span.set_attribute("skiplock.job.outcome", outcome)
        if error is not None:
            span.add_event("exception", {"exception.message": error})
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end()


def _outcome(out: BatchEndings, stage: Stage, job: Job, done: set | None) -> tuple[str | None, str | None]:
    """(outcome word, error text) of the job in `out`. A failure is `retried` while the
    job has attempts left (fail.sql's rule), else `failed`."""
    if job.id in out.deferred:
        return "deferred", None
    if any(cancelled.id == job.id for cancelled in out.cancelled):
        return "cancelled", None  # a person's cancel stopped it: no error of the job's
    for failed, error, for_good in reversed(out.failed):
        if failed.id == job.id:
            return ("failed" if for_good or job.attempts >= stage.max_attempts else "retried"), error
    # one job's id was appended a moment ago: looked for from the end
    if job.id in (reversed(out.done) if done is None else done):
        return "done", None
    return None, None
