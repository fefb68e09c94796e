"""Plan allowances and credits, per campaign and UTC day.

A campaign's plan is its owner's subscription (PLANS in app/outreach/plans.py). Each plan
allows so many pages and so many credits (paid work, such as a draft) per campaign
and UTC day. Counters live in campaign_usage and only move by guarded statements, so
concurrent runs never overspend; credits are also written to credit_ledger, where a
job is charged at most once (its retries reuse the charge) and refunded at most once.
"""

from __future__ import annotations

import uuid

from app.outreach.sql import statement
from app.outreach.plans import DEFAULT_PLAN, OWNERLESS_PLAN, PLANS, Plan

CHARGED = "charged"          # this call took a credit
ALREADY_CHARGED = "already"  # an earlier attempt of the same job paid; nothing taken now
SPENT = "spent"              # today's credits are used up: come back tomorrow


class _Spent(Exception):
    """Rolls back the charge's transaction when the allowance has nothing left."""


async def campaign_plan(db, campaign_id: uuid.UUID | None) -> Plan:
    """The plan a campaign's work runs under (the ownerless and default rules of PLANS).

    No campaign (ownerless work) and an ownerless campaign count as OWNERLESS_PLAN; an
    owner with no subscription, or one naming a plan that no longer exists, is on
    DEFAULT_PLAN, like the claim query's priority expression says."""
    if campaign_id is None:
        return PLANS[OWNERLESS_PLAN]
    row = await db.fetchrow(*statement("campaign_plan").bind(campaign_id=campaign_id))
    if row is None or row["ownerless"]:
        return PLANS[OWNERLESS_PLAN]
    return PLANS.get(row["plan"] or DEFAULT_PLAN, PLANS[DEFAULT_PLAN])


async def use_page(db, campaign_id: uuid.UUID, daily_pages: int) -> bool:
    """Count one page against today's allowance; False when it is used up."""
    return await db.fetchval(*statement("usage_add_page").bind(campaign_id=campaign_id,
                                                               daily_pages=daily_pages)) is not None


async def charge_credit(pool_or_conn, campaign_id: uuid.UUID, job_id: uuid.UUID,
                        daily_credits: int) -> str:
    """Charge job `job_id` one credit of today's allowance, once per job.

    Returns CHARGED, ALREADY_CHARGED (an earlier attempt paid) or SPENT (nothing taken).
    The ledger line and the counter commit together or not at all."""
    acquire = getattr(pool_or_conn, "acquire", None)
    if acquire is not None:
        async with acquire() as conn:
            return await _charge(conn, campaign_id, job_id, daily_credits)
    return await _charge(pool_or_conn, campaign_id, job_id, daily_credits)


async def _charge(conn, campaign_id, job_id, daily_credits) -> str:
    try:
        async with conn.transaction():
            # the ledger line first: a second charge of the same job waits on the unique
            # index and then finds the first one, so it can never pay twice
            if await conn.fetchval(*statement("credit_charge").bind(campaign_id=campaign_id,
                                                                    job_id=job_id)) is None:
                return ALREADY_CHARGED
            if await conn.fetchval(*statement("usage_add_credit").bind(campaign_id=campaign_id,
                                                                       daily_credits=daily_credits)) is None:
                raise _Spent()
            return CHARGED
    except _Spent:
        return SPENT


async def refund_credit(db, job_id: uuid.UUID) -> int:
    """Give job `job_id`'s credit back, exactly once; returns the credits refunded (0 when
    the job was never charged or was refunded already). Run it in the transaction that
    marks the job failed, so the refund and the failure commit together."""
    return await db.fetchval(*statement("credit_refund").bind(job_id=job_id))


async def usage_today(db, campaign_id: uuid.UUID) -> dict[str, int]:
    row = await db.fetchrow(*statement("usage_today").bind(campaign_id=campaign_id))
    return {"pages": row["pages"], "credits": row["credits"]}
