"""The FastAPI app factory.

    create_app()                            settings from the environment, PIPELINE_STAGES
    create_app(settings, stages=[...])      what tests and embedders pass

`uvicorn --factory app.api.main:create_app` serves it; `make run` and the Lambda
handler build it the same way. The pool is created on first use and closed by the
lifespan shutdown (which Lambda never runs: there the pool lives with the process).

Middleware, outermost first: the JSON 500 catch-all, per-client rate limits (Redis,
failing open), Idempotency-Key (Postgres), then the routes."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import audit, batches, cron, errors, health, jobs, openapi, runs
from app.outreach import routes as campaigns
from app.api.auth import TENANT
from app.api.idempotency import Idempotency
from app.api.ratelimit import RateLimit
from app.api.redis_gate import RedisGate
from app.api.runtime import Runtime
from app.pipeline.stage import Stage
from app.settings import Settings, get_settings


def create_app(settings: Settings | None = None, stages: list[Stage] | None = None) -> FastAPI:
    runtime = Runtime(settings or get_settings(), stages)
    gate = RedisGate(runtime.settings.redis_url, runtime.settings.redis_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await runtime.close()
        await gate.close()

    app = FastAPI(title="Skiplock", version="0.1.0", lifespan=lifespan,
                  description="Background work in the Postgres the app already runs: the pipeline "
                              "trigger, the jobs and runs it works through, and their batches.")
    app.state.runtime = runtime
    app.state.redis = gate
    app.add_middleware(Idempotency, runtime=runtime)
    app.add_middleware(RateLimit, settings=runtime.settings, gate=gate)
    errors.install(app)  # last, so its catch-all is the outermost middleware
    app.include_router(cron.router)
    app.include_router(health.router)
    # Tenant routes: an API key, and row-level security in a transaction per request.
    for router in (jobs.router, runs.router, batches.router, campaigns.router, audit.router):
        app.include_router(router, dependencies=[TENANT])
    openapi.install(app, runtime)
    return app
