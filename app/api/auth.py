"""API keys and the tenant transaction every tenant route runs in.

`Authorization: Bearer slk_...` names an API key; its owner is the tenant. The request's
work happens on one connection, in one transaction, as the role skiplock_api (an admin
key's: skiplock_admin), presenting the key's digest transaction-locally: row-level
security finds the tenant from that key and filters every query the route runs, so a
forgotten `WHERE user_id = ...` still returns nothing foreign. A tenant's key (not an
admin's) also gets TENANT_STATEMENT_TIMEOUT_SECONDS per statement. The
transaction commits before the answer is sent (or rolls back on an error), and since
the settings are local to it, the pooled connection goes back carrying nothing."""

from __future__ import annotations

import hmac
from contextlib import nullcontext
from typing import AsyncIterator

from fastapi import Depends, Request

from app.api.bearer import bearer_token, challenge
from app.api.deps import owner_pool_of, tenant_pool_of
from app.api.errors import ApiError
from app.engine import accounts
from app.engine.one_connection import OneConnection
from app.engine.tenancy import Actor, enter_tenant
from app.settings import Settings

# The request's one connection, shaped like a pool for code written against one.
RequestDb = OneConnection


async def key_holder(request: Request) -> tuple[Actor, str]:
    """The actor the request's API key stands for, and the key's prefix (its public id,
    what the Idempotency layer scopes keys by); 401 for a missing, malformed, unknown or
    revoked key.

    Looked up once a request: a request with an Idempotency-Key is authenticated by that
    layer first, and the route's tenant dependency reuses what it found, kept on the
    request's state (one per ASGI scope, which the server makes anew for each request),
    for that same key only."""
    key = bearer_token(request, "api", "<API key>")
    actor = getattr(request.state, "key_actor", None)
    if actor is None or not hmac.compare_digest(actor.key.digest, accounts.digest(key)):
        actor = await accounts.authenticate(await owner_pool_of(request), key)
        if actor is None:
            raise ApiError(401, "unauthorized", "unknown, revoked or malformed API key", headers=challenge("api"))
        request.state.key_actor = actor
    return actor, actor.key.prefix


def statement_timeout_ms(settings: Settings, actor: Actor) -> int | None:
    """A tenant key's per-statement limit, in ms. None for an admin key: the operator's
    requests (a retry of every failed job, say) are not limited, as they are not counted
    in flight; and None when TENANT_STATEMENT_TIMEOUT_SECONDS is 0."""
    seconds = settings.tenant_statement_timeout_seconds
    if actor.is_admin or not seconds:
        return None
    return max(1, round(seconds * 1000))


async def tenant(request: Request) -> AsyncIterator[Actor]:
    """Authenticate the key, then hold the request's tenant transaction around the route.
    A tenant's key (not an admin's: the operator's) counts against its owner's requests
    in flight first: past TENANT_REQUESTS_IN_FLIGHT it waits for one of them to end before
    it asks the pool for a connection."""
    actor, _ = await key_holder(request)
    counted = None if actor.is_admin or actor.user_id is None else request.app.state.tenant_in_flight
    async with (counted.turn(actor.user_id) if counted is not None else nullcontext()):
        pool = await tenant_pool_of(request, actor)
        async with pool.acquire() as conn:
            tr = conn.transaction()
            await tr.start()
            try:
                await enter_tenant(conn, actor, statement_timeout_ms=statement_timeout_ms(
                    request.app.state.runtime.settings, actor))
                request.state.actor = actor
                request.state.db = RequestDb(conn)
                yield actor
            except BaseException:
                await tr.rollback()
                raise
            else:
                await tr.commit()
            finally:
                request.state.db = None


# For routers: every route runs inside the tenant transaction, which ends before the
# answer is sent.
TENANT = Depends(tenant, scope="function")


def require_admin(request: Request) -> None:
    actor = getattr(request.state, "actor", None)
    if actor is None or not actor.is_admin:
        raise ApiError(403, "forbidden", "this route needs an admin API key")
