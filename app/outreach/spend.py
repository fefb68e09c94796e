"""What a page fetch costs: one page of the campaign's daily allowance (its plan's) and
one unit of the shared quota, counted against the owner's share of it too. All are taken
in one transaction before the fetch, so a fetch the quota refuses does not use up the
campaign's allowance or the owner's share either."""

from __future__ import annotations

import uuid

from app.outreach import allowances, quota
from app.outreach.settings import outreach_settings
from app.outreach.sql import statement
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
    async with ctx.db.acquire() as conn:
        try:
            async with conn.transaction():
                if not await allowances.use_page(conn, campaign_id, plan.daily_pages):
                    raise _UsedUp(f"the {plan.label} plan's {plan.daily_pages} pages a day are used up",
                                  owner_wide=False)
                if not await quota.spend_share(conn, campaign_id, UNITS_PER_FETCH, share=share):
                    raise _UsedUp(f"the owner's share of the shared quota ({share} units a day on the "
                                  f"{plan.label} plan) is used up", owner_wide=True)
                spent = await quota.spend(conn, UNITS_PER_FETCH, ctx.trigger,
                                          daily_units=s.quota_daily_units, reserve=s.quota_reserve_units)
                if spent.status == quota.RESERVE:
                    raise StopRun(quota.RESERVE)  # rolls back the page too
                if spent.status == quota.EXHAUSTED:
                    raise StopRun(quota.EXHAUSTED, quota.next_utc_day())
        except _UsedUp as used_up:
            # the rest of the backlog waits too, on the same connection once the spend's
            # transaction is rolled back (a second one from the pool while holding this
            # one could wait for ever, and a run keeps to two)
            await conn.execute(*statement("fetches_wait").bind(campaign_id=campaign_id, until=used_up.until,
                                                               types=FETCH_TYPES,
                                                               owner_wide=used_up.owner_wide))
            raise
    ctx.add_units(UNITS_PER_FETCH)


class _UsedUp(DeferJob):
    """A daily allowance is used up: the job waits for the next UTC day, and so does the
    rest of the campaign's fetch backlog (owner_wide, the owner's share of the quota: every
    campaign of the owner's). Deferred one claim at a time, each job handed its `served`
    back, so a flooded lane stayed first in the claim order, ahead of its plan's other
    lanes, for as many claims as it had jobs."""

    def __init__(self, reason: str, *, owner_wide: bool) -> None:
        super().__init__(quota.next_utc_day(), reason)
        self.owner_wide = owner_wide
