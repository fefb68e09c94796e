"""What a page fetch costs: one page of the campaign's daily allowance (its plan's) and
one unit of the shared quota, counted against the owner's share of it too. All are taken
in one transaction before the fetch, so a fetch the quota refuses does not use up the
campaign's allowance or the owner's share either."""

from __future__ import annotations

import uuid

from app.outreach import allowances, quota
from app.outreach.settings import outreach_settings
from app.outreach.sql import query
from app.pipeline.stage import Context, DeferJob, StopRun

UNITS_PER_FETCH = 1
# the stages whose jobs pay for a fetch (brief.BRIEF, crawl.CRAWL: both import this module)
FETCH_TYPES = ["brief", "crawl"]


async def spend_fetch(ctx: Context, campaign_id: uuid.UUID) -> None:
    """Pay for one fetch, or raise:

    DeferJob(next UTC day)   the campaign's plan allows no more pages today, or its
                             owner's share of the shared quota is used up (other
                             owners' jobs keep going);
    StopRun("quota_reserve") only the reserve is left and a schedule started this run
                             (the job waits for the next run; a person's run may use it);
    StopRun("quota_exhausted", next UTC day)  the shared quota is spent for today."""
    s = outreach_settings()
    plan = await allowances.campaign_plan(ctx.db, campaign_id)
    share = plan.quota_share(s.quota_daily_units)
    async with ctx.db.acquire() as conn, conn.transaction():
        if not await allowances.use_page(conn, campaign_id, plan.daily_pages):
            await _all_wait(ctx, campaign_id, owner_wide=False)
            raise DeferJob(quota.next_utc_day(),
                           f"the {plan.label} plan's {plan.daily_pages} pages a day are used up")
        if not await quota.spend_share(conn, campaign_id, UNITS_PER_FETCH, share=share):
            await _all_wait(ctx, campaign_id, owner_wide=True)
            raise DeferJob(quota.next_utc_day(),
                           f"the owner's share of the shared quota ({share} units a day on the "
                           f"{plan.label} plan) is used up")
        spent = await quota.spend(conn, UNITS_PER_FETCH, ctx.trigger,
                                  daily_units=s.quota_daily_units, reserve=s.quota_reserve_units)
        if spent.status == quota.RESERVE:
            raise StopRun(quota.RESERVE)  # rolls back the page too
        if spent.status == quota.EXHAUSTED:
            raise StopRun(quota.EXHAUSTED, quota.next_utc_day())
    ctx.add_units(UNITS_PER_FETCH)


async def _all_wait(ctx: Context, campaign_id: uuid.UUID, *, owner_wide: bool) -> None:
    """The campaign's (owner_wide: its owner's every campaign's) other waiting fetch jobs
    wait for the next UTC day too, at once: deferred one claim at a time, each handed its
    `served` back and the lane stayed first in the claim order, ahead of its plan's other
    lanes, for as many claims as it had jobs. Its own statement (on the pool), not the
    spend's transaction, which the deferral rolls back."""
    await ctx.db.execute(query("fetches_wait"), campaign_id, quota.next_utc_day(), FETCH_TYPES, owner_wide)
