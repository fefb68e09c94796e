"""The example's test data: users on a plan, and campaigns (a campaign's id is its lane's).
The queue's builders (tests/factories.py) are here too, so an example test imports one
module; `user` and `api_key` take a plan here."""

from __future__ import annotations

import uuid

from app.engine.tenancy import acting
from app.outreach.store import set_plan
from tests import factories as core
from tests.factories import *  # noqa: F403  the queue's builders, unchanged
from tests.factories import TEST_ACTOR, as_system


async def user(db, plan: str | None = "free", email: str | None = None) -> uuid.UUID:
    """A user, on `plan` unless it is None."""
    uid = await core.user(db, email)
    if plan:
        async with acting(db, TEST_ACTOR) as conn:
            await set_plan(conn, uid, plan)
    return uid


async def api_key(db, email: str, admin: bool = False, plan: str | None = "free") -> str:
    """A user (created when new, on `plan` unless it is None) with a fresh API key."""
    key = await core.api_key(db, email, admin)
    if plan is not None:
        await user(db, plan, email)
    return key


async def campaign(db, owner: uuid.UUID | None = None, status: str = "active", name: str = "") -> uuid.UUID:
    return await as_system(
        db, "INSERT INTO campaigns (user_id, status, name) VALUES ($1, $2, $3) RETURNING id",
        owner, status, name)
