"""The FastAPI app factory.

    create_app()                            settings from the environment: PIPELINE_PLUGINS
                                            (their stages and routes) and PIPELINE_STAGES
    create_app(settings, stages=[...], plugins=[...])   what tests and embedders pass

`uvicorn --factory app.api.main:create_app` serves it; `make run` and the Lambda
handler build it the same way. The pool is created on first use and closed by the
lifespan shutdown (which Lambda never runs: there the pool lives with the process).

Middleware, outermost first: the JSON 500 catch-all, the body cap (413, and 408 for a
body that does not come), per-client rate limits (Redis, failing open), route matching
(404 and 405), the JSON body's shape (413 before anything parses it), Idempotency-Key
(Postgres, after authenticating), then the routes."""

from __future__ import annotations

import logging
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import (audit, batches, cron, dashboard, docs, errors, events, health, job_bulk, job_story, jobs,
                     lanes, metrics, openapi, runs, trends)
from app.api.auth import TENANT
from app.api.body_limit import BodyLimit
from app.api.body_shape import BodyShape
from app.api.idempotency import Idempotency
from app.api.in_flight import InFlight
from app.api.ratelimit import RateLimit
from app.api.redis_gate import RedisGate
from app.api.route_gate import RouteGate
from app.api.stages import router as stages_router
from app.logs import install_redaction, redact_values
from app.runtime import Runtime
from app.pipeline.stage import Stage
from app.plugin import Plugin
from app.settings import Settings, SettingsError, get_settings

log = logging.getLogger("skiplock.api")
_said = {"cursor": False}


def create_app(settings: Settings | None = None, stages: list[Stage] | None = None,
               plugins: list[Plugin] | None = None, runtime: Runtime | None = None) -> FastAPI:
    """runtime: one made already (the Lambda handler's, whose pool the schedule uses too).

    Built from the environment (`uvicorn --factory`), a setting that cannot work (a cron
    secret shorter than 32 characters, say) stops the process with one line, not a traceback."""
    if runtime is None and settings is None:
        try:
            settings = get_settings()
        except SettingsError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
    runtime = runtime or Runtime(settings, stages, plugins=plugins)
    # what this app is given never reaches a log line, uvicorn's request lines included
    install_redaction()
    redact_values(*(s.get_secret_value() for s in (runtime.settings.cron_secret, runtime.settings.metrics_token,
                                                   runtime.settings.cursor_secret, runtime.settings.webhook_secret)
                    if s is not None))
    if runtime.settings.cursor_secret is None and not runtime.settings.local_dev and not _said["cursor"]:
        _said["cursor"] = True  # once a process
        log.warning("CURSOR_SECRET is unset: page cursors are signed with a key of this process only, so a "
                    "cursor made by another process is refused; set CURSOR_SECRET where several processes serve")
    gate = RedisGate(runtime.settings.redis_url, runtime.settings.redis_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await events.close_event_hub(app)
        await runtime.close()
        await gate.close()

    # FastAPI's own /docs and /redoc load unpinned scripts from a CDN: ours serve the pinned package's (docs.py)
    app = FastAPI(title="Skiplock", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Background work in the Postgres the app already runs: the pipeline "
                              "trigger, the jobs and runs it works through, and their batches.")
    app.state.runtime = runtime
    app.state.redis = gate
    app.state.tenant_in_flight = InFlight(runtime.settings.tenant_requests_in_flight)
    app.add_middleware(Idempotency, runtime=runtime)
    app.add_middleware(BodyShape, max_values=runtime.settings.json_max_values,
                       max_keys=runtime.settings.json_max_object_keys)
    app.add_middleware(RouteGate)
    app.add_middleware(RateLimit, settings=runtime.settings, gate=gate)
    app.add_middleware(BodyLimit, max_bytes=runtime.settings.max_body_bytes,
                       timeout=runtime.settings.request_body_timeout_seconds)
    errors.install(app)  # last, so its catch-all is the outermost middleware
    app.include_router(cron.router)
    app.include_router(health.router)
    app.include_router(metrics.router)  # its own auth: METRICS_TOKEN or an admin key
    app.include_router(events.ws_router)  # its own auth: a WebSocket cannot always send headers
    app.include_router(dashboard.page_router)  # the page and its assets; the key is entered on it
    docs.install(app, runtime.settings.api_docs)  # /docs and /redoc, unless API_DOCS is off
    # Tenant routes: an API key, and row-level security in a transaction per request.
    # The plug-ins' routes are tenant routes too.
    plugin_routers = [r for p in runtime.plugins for r in p.tenant_routers()]
    # job_bulk first: POST /jobs/bulk/retry would otherwise be /jobs/{job_id}/retry's
    tenant_routers = [job_bulk.router, jobs.router, job_story.router, runs.router, lanes.router, stages_router,
                      batches.router, *plugin_routers, audit.router, events.router, dashboard.router, trends.router]
    for router in tenant_routers:
        app.include_router(router, dependencies=[TENANT])
    openapi.install(app, runtime, tenant_routers)
    return app
