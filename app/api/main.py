"""The FastAPI app factory.

    create_app()                            settings from the environment, PIPELINE_STAGES
    create_app(settings, stages=[...])      what tests and embedders pass

`uvicorn --factory app.api.main:create_app` serves it; `make run` and the Lambda
handler build it the same way. The pool is created on first use and closed by the
lifespan shutdown (which Lambda never runs: there the pool lives with the process)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import batches, cron, errors, health
from app.api.runtime import Runtime
from app.pipeline.stage import Stage
from app.settings import Settings, get_settings


def create_app(settings: Settings | None = None, stages: list[Stage] | None = None) -> FastAPI:
    runtime = Runtime(settings or get_settings(), stages)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await runtime.close()

    app = FastAPI(title="Skiplock", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    errors.install(app)
    app.include_router(cron.router)
    app.include_router(health.router)
    app.include_router(batches.router)
    return app
