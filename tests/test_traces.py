"""Traces (app/pipeline/tracing.py): a run is a span, each job a child span with its type,
lane, attempt and outcome, linked to the span that enqueued it; without a tracer provider
(or without OpenTelemetry at all) nothing of it is imported. Real runs on the real
database, spans caught by the SDK's InMemorySpanExporter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install -e '.[otel]'")

from opentelemetry import propagate, trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

from app import DeferJob, FailJob, Stage  # noqa: E402
from app.api import create_app  # noqa: E402
from app.engine import jobs as q  # noqa: E402
from app.engine.batches import BatchRequest, create_batch  # noqa: E402
from app.engine.jobs import NewJob  # noqa: E402
from app.pipeline import admission  # noqa: E402
from app.pipeline.loop import Pipeline  # noqa: E402
from app.pipeline.outcomes import cancel_job  # noqa: E402
from app.settings import load_settings  # noqa: E402
from tests import factories as f  # noqa: E402

SETTINGS = load_settings(database_url="postgresql://unused")


@pytest.fixture
def spans():
    """A global SDK tracer provider for the test, exporting to memory; afterwards the process
    has none again (as OpenTelemetry's own test utilities reset it), so the tests after
    this one run untraced."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


def traceparent(span) -> str:
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


def job_spans(exporter, type_: str | None = None) -> list:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("skiplock job ")
            and (type_ is None or s.attributes["skiplock.job.type"] == type_)]


def run_span(exporter):
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "skiplock run"]
    return run


async def test_a_run_is_a_span_and_each_job_a_child_with_its_outcome(pool, spans):
    async def ok(job, ctx):
        pass

    async def flaky(job, ctx):
        raise ValueError("upstream said 503")

    async def fatal(job, ctx):
        raise FailJob("no address to send to")

    async def later(job, ctx):
        raise DeferJob(3600)

    async def some_of(jobs, ctx):  # a batch handler: the second of its jobs fails
        return {jobs[1].id: RuntimeError("the second one broke")}

    lane = await f.lane(pool)
    stages = [Stage(type="ok", handler=ok), Stage(type="flaky", handler=flaky, max_attempts=3),
              Stage(type="fatal", handler=fatal), Stage(type="later", handler=later),
              Stage(type="many", batch_handler=some_of, batch=5)]
    for s in stages:
        await f.jobs(pool, s.type, 2 if s.type == "many" else 1, lane=lane)

    result = await Pipeline(pool, stages, SETTINGS).run("manual")
    assert (result.jobs_done, result.jobs_retried, result.jobs_failed, result.jobs_deferred) == (2, 2, 1, 1)

    run = run_span(spans)
    assert run.attributes["skiplock.run.id"] == str(result.run_id)
    assert run.attributes["skiplock.run.trigger"] == "manual"
    assert run.attributes["skiplock.run.stop_reason"] == "no_work"
    assert (run.attributes["skiplock.run.jobs_done"], run.attributes["skiplock.run.jobs_retried"],
            run.attributes["skiplock.run.jobs_failed"], run.attributes["skiplock.run.jobs_deferred"]) == (2, 2, 1, 1)
    for job in job_spans(spans):
        assert job.parent.span_id == run.context.span_id and job.context.trace_id == run.context.trace_id
        assert job.kind is SpanKind.CONSUMER

    rows = {r["type"]: r for r in await pool.fetch("SELECT id, type, lane FROM jobs WHERE type <> 'many'")}
    expected = {"ok": "done", "flaky": "retried", "fatal": "failed", "later": "deferred"}
    for type_, outcome in expected.items():
        (span,) = job_spans(spans, type_)
        assert span.attributes["skiplock.job.id"] == str(rows[type_]["id"])
        assert span.attributes["skiplock.job.lane"] == str(lane)
        assert span.attributes["skiplock.job.attempt"] == 1
        assert span.attributes["skiplock.job.outcome"] == outcome, type_
    assert job_spans(spans, "ok")[0].status.status_code is StatusCode.UNSET
    assert job_spans(spans, "later")[0].status.status_code is StatusCode.UNSET  # deferred is no error
    flaky_span = job_spans(spans, "flaky")[0]
    assert flaky_span.status.status_code is StatusCode.ERROR
    assert flaky_span.status.description == "ValueError: upstream said 503"
    assert [e.attributes["exception.message"] for e in flaky_span.events if e.name == "exception"] == [
        "ValueError: upstream said 503"]
    assert job_spans(spans, "fatal")[0].status.description == "no address to send to"
    many = sorted(job_spans(spans, "many"), key=lambda s: s.attributes["skiplock.job.outcome"])
    assert [s.attributes["skiplock.job.outcome"] for s in many] == ["done", "retried"]
    assert many[1].status.description == "RuntimeError: the second one broke"


async def test_a_job_cancelled_while_it_runs_says_so(pool, spans):
    """A person's cancel, noticed by the run that holds the job (cancel_watch.py)."""
    started, never = asyncio.Event(), asyncio.Event()

    async def wait(job, ctx):
        started.set()
        await never.wait()

    stage = Stage(type="t", handler=wait, timeout=30)
    [job_id] = await f.jobs(pool, "t", 1)
    run = asyncio.create_task(Pipeline(pool, [stage], SETTINGS).run("manual", budget=20))
    await asyncio.wait_for(started.wait(), 10)
    await cancel_job(pool, [stage], job_id, SETTINGS)
    await asyncio.wait_for(run, 15)
    (span,) = job_spans(spans, "t")
    assert span.attributes["skiplock.job.outcome"] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET


async def test_the_job_span_links_to_the_span_that_enqueued_it(pool, spans):
    """Python code (admission, the engine, a batch) and plain SQL enqueue inside a request's
    span; each job's span links to it, and stays the run's child."""
    lane = await f.lane(pool)
    seen = []

    async def handle(job, ctx):
        seen.append(trace.get_current_span())  # the job's span is current in its handler

    async def handle_all(jobs, ctx):
        pass

    stages = [Stage(type="t", handler=handle, batch=10), Stage(type="b", batch_handler=handle_all)]
    tracer = trace.get_tracer("the app")
    with tracer.start_as_current_span("POST /signup") as request:
        admitted = await admission.admit(pool, stages, "t", {"n": 1}, lane=lane, settings=SETTINGS)
        by_engine = await q.enqueue(pool, NewJob(type="t", lane=lane, payload={"n": 2}))
        batch = await create_batch(pool, lane, [BatchRequest("b", {})])
    untraced = await q.enqueue(pool, NewJob(type="t", lane=lane, payload={"n": 3}))
    by_sql, garbage = await pool.fetch(
        "INSERT INTO jobs (type, lane, payload, trace_context) VALUES ('t', $1, '{\"n\": 4}', $2), "
        "('t', $1, '{\"n\": 5}', 'not a traceparent') RETURNING id", lane,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

    stored = dict(await pool.fetch("SELECT id, trace_context FROM jobs"))
    assert stored[admitted.job["id"]] == stored[by_engine] == stored[batch.created["b"]] == traceparent(request)
    assert stored[untraced] is None

    result = await Pipeline(pool, stages, SETTINGS).run("manual")
    assert result.jobs_done == 6
    run = run_span(spans)
    by_id = {s.attributes["skiplock.job.id"]: s for s in job_spans(spans)}
    for job_id in (admitted.job["id"], by_engine, batch.created["b"]):
        span = by_id[str(job_id)]
        (link,) = span.links
        assert link.context.trace_id == request.context.trace_id and link.context.span_id == request.context.span_id
        assert span.parent.span_id == run.context.span_id  # a link, not a parent
    (sql_link,) = by_id[str(by_sql["id"])].links
    assert (sql_link.context.trace_id, sql_link.context.span_id) == (0x0af7651916cd43dd8448eb211c80319c,
                                                                   0xb7ad6b7169203331)
    assert by_id[str(untraced)].links == () and by_id[str(garbage["id"])].links == ()
    assert sorted(s.get_span_context().span_id for s in seen) == sorted(
        s.context.span_id for s in job_spans(spans, "t"))


async def test_a_job_enqueued_by_a_handler_links_to_that_jobs_span(pool, spans):
    async def first(job, ctx):
        await q.enqueue(ctx.db, NewJob(type="second"))

    async def second(job, ctx):
        pass

    await f.jobs(pool, "first", 1)
    await Pipeline(pool, [Stage(type="first", handler=first), Stage(type="second", handler=second)],
                   SETTINGS).run("manual")
    (one,), (two,) = job_spans(spans, "first"), job_spans(spans, "second")
    assert [link.context.span_id for link in two.links] == [one.context.span_id]


async def test_a_debounced_job_keeps_the_newest_enqueuers_trace_context(pool, spans):
    """enqueue_replacing (on_conflict replace): the pending job takes the newer payload and
    the newer request's trace context; an untraced replace leaves the one it had."""
    tracer = trace.get_tracer("the app")
    with tracer.start_as_current_span("first request"):
        job_id, created = await q.enqueue_replacing(pool, NewJob(type="t", dedupe_key="k", payload={"v": 1}))
    with tracer.start_as_current_span("second request") as second:
        assert await q.enqueue_replacing(pool, NewJob(type="t", dedupe_key="k", payload={"v": 2})) == (job_id, False)
    assert await q.enqueue_replacing(pool, NewJob(type="t", dedupe_key="k", payload={"v": 3})) == (job_id, False)
    assert created
    assert await pool.fetchval("SELECT trace_context FROM jobs WHERE id = $1", job_id) == traceparent(second)


async def test_the_api_stores_the_requests_trace_context(dsn, pool, admin_headers, spans):
    """POST /jobs and a batch, called by a traced client (its traceparent header sent, as
    a service calling the API does): the jobs keep the request's trace context, the span
    current where the route ran (FastAPI's own, when it traces requests)."""
    lane = await f.lane(pool)

    async def handle(job, ctx):
        pass

    settings = load_settings(database_url=dsn, pipeline_plugins="")
    app = create_app(settings, [Stage(type="t", handler=handle), Stage(type="u", handler=handle)])
    tracer = trace.get_tracer("the caller")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 headers=admin_headers) as client:
        with tracer.start_as_current_span("calling the API") as caller:
            sent: dict[str, str] = {}
            propagate.inject(sent)
            one = await client.post("/jobs", json={"type": "t", "payload": {}, "lane": str(lane)}, headers=sent)
            two = await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "u", "payload": {}}]},
                                    headers=sent)
    await app.state.runtime.close()
    assert one.status_code == 201 and two.status_code == 201, (one.text, two.text)
    in_trace = {s.context.span_id for s in spans.get_finished_spans()
                if s.context.trace_id == caller.context.trace_id}
    for row in await pool.fetch("SELECT trace_context FROM jobs"):
        _, trace_id, span_id, _ = row["trace_context"].split("-")
        assert int(trace_id, 16) == caller.context.trace_id and int(span_id, 16) in in_trace


async def test_without_a_tracer_provider_no_span_and_no_context(pool):
    """opentelemetry loaded (this module imports it) but no provider set: nothing traced."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    async def handle(job, ctx):
        assert not trace.get_current_span().get_span_context().is_valid

    with trace.get_tracer("the app").start_as_current_span("untraced"):
        job_id = await q.enqueue(pool, NewJob(type="t"))
    result = await Pipeline(pool, [Stage(type="t", handler=handle)], SETTINGS).run("manual")
    assert result.jobs_done == 1
    assert await pool.fetchval("SELECT trace_context FROM jobs WHERE id = $1", job_id) is None


# Imports the queue as a deployment does, enqueues and runs a job on the real database, and
# says which opentelemetry modules it loaded beyond what FastAPI itself loads (FastAPI
# imports opentelemetry-api for its own request spans), and which imports of it were tried.
# "installed": the app, FastAPI included, with the otel extra installed and no tracer
# provider set. "absent": as if OpenTelemetry were not installed at all, the queue without
# FastAPI (a worker's, a scheduled run's imports).
_COLD = textwrap.dedent("""
    import asyncio, json, sys

    def loaded():
        return {m for m in sys.modules if m.split(".")[0] == "opentelemetry"}

    tried = []

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                tried.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    if sys.argv[1] == "absent":
        sys.meta_path.insert(0, NotInstalled())
        import app.pipeline.worker
        fastapis = set()
    else:
        import fastapi
        fastapis = loaded()
        import app.api.main

    from app import Stage
    from app.engine import jobs as q
    from app.engine.db import create_pool
    from app.engine.jobs import NewJob
    from app.pipeline.loop import Pipeline
    from app.settings import load_settings

    async def main():
        settings = load_settings()
        pool = await create_pool(settings.database_url)
        if sys.argv[1] == "installed":
            app.api.main.create_app(settings, [])
        async def handle(job, ctx):
            await q.enqueue(ctx.db, NewJob(type="t2"))
        async def noop(job, ctx):
            pass
        await q.enqueue(pool, NewJob(type="t"))
        result = await Pipeline(pool, [Stage(type="t", handler=handle), Stage(type="t2", handler=noop)],
                                settings).run("manual")
        await pool.close()
        return result.jobs_done

    done = asyncio.run(main())
    print(json.dumps({"done": done, "tried": tried, "beyond FastAPI's": sorted(loaded() - fastapis)}))
""")


@pytest.mark.parametrize("extra", ["installed", "absent"])
def test_untraced_nothing_of_opentelemetry_is_imported(dsn, extra):
    """Cold start unchanged: importing the queue, an enqueue and a run load nothing of
    opentelemetry (beyond what FastAPI loads for itself), the extra installed or not."""
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_PLUGINS": "", "PIPELINE_STAGES": ""}
    out = subprocess.run([sys.executable, "-c", _COLD, extra], env=env, capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said == {"done": 2, "tried": [], "beyond FastAPI's": []}
