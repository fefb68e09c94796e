"""Adding a campaign starts the example pipeline for it: the campaign row, its owner
(created on the asked plan when new) and its first jobs, `brief` and the crawl of its home
page waiting for the brief, in one transaction.
What the CLI's `campaign add`, the API's POST /campaigns and the demo seed call.

An owner has one campaign per URL (after normalize_url): adding it again answers with the
campaign that is there (`created` False, no new brief), whatever the plan's limit says."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

from app.outreach import store
from app.engine import accounts
from app.engine import jobs as q
from app.engine.dependencies import enqueue_after
from app.engine.tenancy import act_as_default
from app.outreach.sql import statement
from app.outreach.plans import DEFAULT_PLAN, PLANS, Plan
from app.outreach.brief import brief_job
from app.outreach.crawl import home_crawl_job
from app.outreach.urls import BadUrl, normalize_url



class CampaignInputError(ValueError):
    """Input a campaign cannot be made from; the message says what to change."""


class PlanConflictError(CampaignInputError):
    """The owner exists on another plan; adding a campaign does not change a subscription."""


class CampaignLimitError(CampaignInputError):
    """The owner already has as many campaigns as their plan allows."""

    def __init__(self, email: str, plan: Plan, campaigns: int) -> None:
        self.plan, self.campaigns = plan, campaigns
        super().__init__(f"{email} has {campaigns} campaigns, as many as the {plan.label} plan allows "
                         f"({plan.max_campaigns}); a bigger plan allows more")


def check_plan(plan: str | None) -> str | None:
    if plan is not None and plan not in PLANS:
        raise CampaignInputError(f"unknown plan {plan!r}; the plans are: {', '.join(PLANS)}")
    return plan


def check_email(email: str) -> str:
    try:
        return accounts.check_email(email)
    except accounts.AccountError as exc:
        raise CampaignInputError(str(exc)) from None


def check_url(url: str) -> str:
    try:
        return normalize_url(url)
    except BadUrl as exc:
        raise CampaignInputError(str(exc)) from None


async def add_campaign_in(conn, url: str, *, owner: str, plan: str | None = None,
                          owner_id: uuid.UUID | None = None) -> dict[str, Any]:
    """add_campaign inside the caller's transaction. `owner_id`: the owner is known and
    exists (an API key's own account), so nobody is looked up or created."""
    url, email, plan = check_url(url), check_email(owner), check_plan(plan)
    await act_as_default(conn)  # the audit log's actor: the caller's if named, else the system
    try:
        if owner_id is None:
            owner_id, plan_name = await store.ensure_owner(conn, email, plan)
        else:
            plan_name = await store.owner_plan(conn, owner_id, email, plan)
    except store.PlanConflict as exc:
        raise PlanConflictError(str(exc)) from None
    # Looked up under the owner's lock, so the second of two identical requests finds the
    # first one's campaign (and is not refused by a limit it does not need).
    await lock_owner(conn, owner_id)
    row = await store.campaign_by_url(conn, owner_id, url)
    created = False
    if row is None:
        await check_campaign_limit(conn, owner_id, email, PLANS.get(plan_name, PLANS[DEFAULT_PLAN]))
        row = await store.insert_campaign(conn, owner_id, urlsplit(url).netloc, url)
        created = row is not None
        if not created:  # made since we looked, by a writer that skips the lock (plain SQL)
            row = await store.campaign_by_url(conn, owner_id, url)
    job_id = await start_campaign(conn, row["id"], row["url"]) if created else None
    return {"id": row["id"], "name": row["name"], "url": row["url"], "status": row["status"],
            "owner": email, "plan": plan_name, "created_at": row["created_at"], "brief_job": job_id,
            "created": created}


async def start_campaign(conn, campaign_id: uuid.UUID, url: str) -> uuid.UUID | None:
    """Queue the campaign's brief and the crawl of its home page `url`, which waits for the
    brief: a brief that fails for good cancels the crawl, and with it the campaign's whole
    crawl. The brief's id; None (and nothing queued) when a brief of the campaign is open."""
    brief_id = await q.enqueue(conn, brief_job(campaign_id))
    if brief_id is not None:
        await enqueue_after(conn, home_crawl_job(campaign_id, url), [brief_id])
    return brief_id


async def lock_owner(conn, owner_id: uuid.UUID) -> None:
    """Hold the owner's row until the transaction ends: one campaign creation at a time each."""
    await conn.execute(*statement("usage_owner_lock").bind(owner_id=owner_id))


async def check_campaign_limit(conn, owner_id: uuid.UUID, email: str, plan: Plan) -> None:
    """Raise CampaignLimitError when the owner has plan.max_campaigns already. Holds a lock
    on the owner's row until the caller's transaction ends: two creations at once for one
    owner count one after the other, so they cannot both slip under the limit."""
    await lock_owner(conn, owner_id)
    campaigns = await conn.fetchval(*statement("usage_owner_campaigns").bind(owner_id=owner_id))
    if campaigns >= plan.max_campaigns:
        raise CampaignLimitError(email, plan, campaigns)


async def add_campaign(pool, url: str, *, owner: str, plan: str | None = None,
                       owner_id: uuid.UUID | None = None) -> dict[str, Any]:
    """A new campaign on `url` for `owner`, with its brief queued (or the owner's campaign
    on that URL, `created` False). Raises CampaignInputError (CampaignLimitError when the
    owner's plan allows no more campaigns)."""
    async with pool.acquire() as conn, conn.transaction():
        return await add_campaign_in(conn, url, owner=owner, plan=plan, owner_id=owner_id)


async def seed_demo(pool, base_url: str, owner: str = "owner@localhost") -> uuid.UUID | None:
    """Create one demo campaign for `base_url` when the database has no campaign at all
    (safe to call from several processes at once); returns its id, or None."""
    async with pool.acquire() as conn, conn.transaction():
        await store.lock_demo_seed(conn)
        if await store.any_campaign(conn):
            return None
        made = await add_campaign_in(conn, base_url, owner=owner)
    return made["id"]
