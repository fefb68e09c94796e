"""Campaigns, their owners and plans, and what the example pipeline found for them.

SQL only: checking input (is this a URL, an e-mail address) is the caller's job."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from app.engine.queries import statement as queue_statement  # users are the queue's
from app.outreach.sql import statement
from app.outreach.plans import DEFAULT_PLAN, OWNERLESS_PLAN

CAMPAIGN_STATUSES = ("active", "paused")  # campaigns.status's CHECK; a paused campaign's lane is skipped


class PlanConflict(Exception):
    """The owner already has a different plan; adding a campaign does not change it."""

    def __init__(self, email: str, current: str, asked: str) -> None:
        self.email, self.current, self.asked = email, current, asked
        super().__init__(f"{email} is on the {current} plan already; a new campaign does not "
                         f"change it (leave out the plan, or ask for {current})")


async def ensure_owner(conn, email: str, plan: str | None) -> tuple[uuid.UUID, str]:
    """The owner with this e-mail and their plan, created (on `plan`, else the default
    plan) when new. Asking for a plan the owner is not on raises PlanConflict."""
    row = await _insert_or_read(conn, *queue_statement("user_ensure").bind(email=email))
    sub = await _insert_or_read(conn, *statement("subscription_ensure").bind(user_id=row["id"],
                                                                             plan=plan or DEFAULT_PLAN))
    if plan is not None and sub["plan"] != plan:
        raise PlanConflict(email, sub["plan"], plan)
    return row["id"], sub["plan"]


async def _insert_or_read(conn, sql: str, *args):
    """The row of an insert-or-read statement (INSERT … ON CONFLICT DO NOTHING, else SELECT).
    When another transaction inserts the same key first, ours waits for it to commit and
    then finds neither: its snapshot is older than that row. Asked again, as a new
    statement, it reads the row (identical requests at once for a new owner)."""
    return await conn.fetchrow(sql, *args) or await conn.fetchrow(sql, *args)


async def set_plan(conn, user_id: uuid.UUID, plan: str) -> None:
    """Put the user on `plan` (a name in PLANS; callers check it)."""
    await conn.execute(*statement("subscription_set").bind(user_id=user_id, plan=plan))


async def owner_plan(conn, owner_id: uuid.UUID, email: str, plan: str | None) -> str:
    """An existing owner's plan; asking for another raises PlanConflict."""
    current = await conn.fetchval(*statement("user_plan").bind(owner_id=owner_id)) or DEFAULT_PLAN
    if plan is not None and plan != current:
        raise PlanConflict(email, current, plan)
    return current


async def insert_campaign(conn, owner_id: uuid.UUID | None, name: str, url: str):
    """The new campaign's row; None when the owner has a campaign on `url` already."""
    return await conn.fetchrow(*statement("campaign_insert").bind(owner_id=owner_id, name=name, url=url))


async def campaign_by_url(conn, owner_id: uuid.UUID, url: str):
    return await conn.fetchrow(*statement("campaign_by_url").bind(owner_id=owner_id, url=url))


async def set_campaign_status(db, campaign_id: uuid.UUID, status: str) -> bool | None:
    """Whether the status changed now (False: it was that already); None: no such campaign."""
    row = await db.fetchrow(*statement("campaign_set_status").bind(campaign_id=campaign_id, status=status))
    return None if row is None else row["changed"]


def _with_plan(row) -> dict[str, Any]:
    """The row with the plan its work runs under (an owner without a subscription: the default)."""
    out = dict(row)
    if out["ownerless"]:
        out["plan"] = OWNERLESS_PLAN
    elif out["plan"] is None:
        out["plan"] = DEFAULT_PLAN
    return out


async def get_campaign(db, campaign_id: uuid.UUID) -> dict[str, Any] | None:
    row = await db.fetchrow(*statement("campaign_get").bind(campaign_id=campaign_id))
    return None if row is None else _with_plan(row)


async def list_campaigns(db, *, status: str | None = None, after: tuple[datetime, uuid.UUID] | None = None,
                         limit: int = 100, own: bool = False) -> list[dict[str, Any]]:
    """Campaigns the caller may see, newest first, `limit` after the keyset `after` (created_at, id).
    `own`, for a tenant's transaction: read its own campaigns only (the same rows row-level
    security would leave, at a cost that grows with them, not with every tenant's)."""
    at, last_id = after if after else (None, None)
    rows = await db.fetch(*statement("campaigns_page").bind(status=status, at=at, last_id=last_id,
                                                            limit=limit, own=own))
    return [_with_plan(r) for r in rows]


async def campaign_exists(db, campaign_id: uuid.UUID) -> bool:
    return await db.fetchrow(*statement("campaign_site").bind(campaign_id=campaign_id)) is not None


async def any_campaign(db) -> bool:
    return await db.fetchval(*statement("campaigns_exist").bind())


async def lock_demo_seed(conn) -> None:
    await conn.execute(*statement("seed_demo_lock").bind())


async def list_contacts(db, campaign_id: uuid.UUID, *, after: tuple[datetime, uuid.UUID] | None = None,
                        limit: int = 100, newest_first: bool = False) -> list[dict[str, Any]]:
    """Contacts with their drafts, `limit` at a time after the keyset `after` (created_at,
    id): in the order found, or newest first (as the API's list pages go)."""
    at, last_id = after if after else (None, None)
    name = "contacts_page" if newest_first else "contacts_list"
    rows = await db.fetch(*statement(name).bind(campaign_id=campaign_id, at=at, last_id=last_id,
                                                limit=limit))
    return [dict(r) for r in rows]
