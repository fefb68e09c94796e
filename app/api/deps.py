"""What the read and write routes share: the database (when it is not there, the
runtime's DatabaseUnavailable, which app/api/errors.py answers as a 503) and the job
types a runtime knows."""

from __future__ import annotations

import asyncpg
from fastapi import Request

from app.engine.tenancy import Actor
from app.runtime import Runtime, user_stages
from app.pipeline.maintenance import MAINTENANCE_TYPE
from app.pipeline.notifications import NOTIFY_TYPE


async def pool_of(request: Request) -> asyncpg.Pool:
    """The request's database: its tenant transaction on tenant routes (see auth.py),
    the pool itself elsewhere."""
    db = getattr(request.state, "db", None)
    if db is not None:
        return db
    return await owner_pool_of(request)


async def owner_pool_of(request: Request) -> asyncpg.Pool:
    """The pool, as the connection's own role (not filtered by tenant)."""
    return await request.app.state.runtime.pool()


async def tenant_pool_of(request: Request, actor: Actor) -> asyncpg.Pool:
    """Where `actor`'s tenant transaction runs: a user key's on the tenant login when
    TENANT_DATABASE_URL names one, an admin key's (the operator's) on the pool."""
    runtime = request.app.state.runtime
    return await (runtime.pool() if actor.is_admin else runtime.tenant_pool())


# In a schema: "enqueueable" or "listed"; the OpenAPI document puts that list of job
# types there as the enum (app/api/openapi.py), since it depends on the deployment.
JOB_TYPES_MARK = "x-skiplock-job-types"


def enqueueable_types_of(runtime: Runtime) -> list[str]:
    """Types a person may enqueue: the runtime's own stages, in order."""
    return [s.type for s in user_stages(runtime.stages)]


def listed_types_of(runtime: Runtime) -> list[str]:
    """Types jobs can have here: the stages, plus the pipeline's own housekeeping."""
    return [MAINTENANCE_TYPE, NOTIFY_TYPE, *(t for t in enqueueable_types_of(runtime)
                                             if t not in (MAINTENANCE_TYPE, NOTIFY_TYPE))]


def enqueueable_types(request: Request) -> list[str]:
    return enqueueable_types_of(request.app.state.runtime)


def listed_types(request: Request) -> list[str]:
    return listed_types_of(request.app.state.runtime)
