"""The shared quota: a rationed third-party budget, in units per UTC day, kept in
Postgres (quota_ledger) and spent atomically, so any number of runs at once never
spend more than there is.

Part of each day's units is a reserve for runs a person started: a scheduled run
stops when only the reserve is left, a person-initiated run may spend it down to zero.

Each owner may spend only a share of the day's units (their plan's quota_share, kept per
owner in quota_user_ledger), so one tenant cannot spend the day for everyone: when their
share is used up their jobs wait for the next UTC day, and everyone else's keep going.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from app.outreach.sql import statement

# Triggers of runs a person started, which may dip into the reserve: `skiplock
# run-once` (manual) and a curl of /cron/pipeline (http). Everything else -- the schedule
# (cron), a long-running worker (worker), anything unknown -- may not.
PERSON_TRIGGERS = frozenset({"manual", "http"})

OK = "ok"
RESERVE = "quota_reserve"        # only the reserve is left, and this run may not use it
EXHAUSTED = "quota_exhausted"    # nothing (or not enough) is left for anyone


@dataclass(frozen=True)
class Spend:
    status: str        # OK, RESERVE or EXHAUSTED (the last two are runs' stop reasons)
    units_left: int    # after this spend (OK) or as found (otherwise)

    @property
    def ok(self) -> bool:
        return self.status == OK


def may_use_reserve(trigger: str) -> bool:
    return trigger in PERSON_TRIGGERS


def next_utc_day(now: datetime | None = None) -> datetime:
    """Midnight UTC at the start of tomorrow: when the daily ledgers start afresh."""
    now = now or datetime.now(timezone.utc)
    tomorrow = now.astimezone(timezone.utc).date() + timedelta(days=1)
    return datetime.combine(tomorrow, time.min, tzinfo=timezone.utc)


async def spend(db, units: int, trigger: str, *, daily_units: int, reserve: int) -> Spend:
    """Take `units` from today's quota, or say why not (never below zero, never racing)."""
    if units < 1:
        raise ValueError("spend at least one unit")
    if daily_units < 0 or reserve < 0:
        raise ValueError("the daily units and the reserve must be zero or more")
    person = may_use_reserve(trigger)
    left = await db.fetchval(*statement("quota_spend").bind(daily_units=daily_units, reserve=reserve,
                                                            units=units, person=person))
    if left is not None:
        return Spend(OK, left)
    row = await db.fetchrow(*statement("quota_state").bind())
    left = row["units_left"] if row else daily_units
    if left < units or left <= 0:
        return Spend(EXHAUSTED, max(left, 0))
    # enough units exist, but only inside the reserve, which this run may not touch
    return Spend(RESERVE, left)


async def spend_share(db, campaign_id, units: int, *, share: int) -> bool:
    """Take `units` of the share of today's quota that the campaign's owner may use
    (`share` units a day); False, taking nothing, when it is used up. A campaign with no
    owner is the operator's: no share applies."""
    if units < 1:
        raise ValueError("spend at least one unit")
    row = await db.fetchrow(*statement("quota_user_spend").bind(campaign_id=campaign_id, share=share,
                                                                units=units))
    return row["owner"] is None or row["spent"] is not None


async def share_spent_today(db, user_id) -> int:
    """Units of the shared quota `user_id`'s campaigns spent today (UTC)."""
    return await db.fetchval(*statement("quota_user_today").bind(user_id=user_id))


@dataclass(frozen=True)
class QuotaDay:
    day: date
    units: int
    reserve: int
    spent: int
    units_left: int


async def today(db, *, daily_units: int, reserve: int) -> QuotaDay:
    """Today's ledger (or the settings' numbers, when nothing was spent yet today)."""
    row = await db.fetchrow(*statement("quota_state").bind())
    if row is None:
        return QuotaDay(datetime.now(timezone.utc).date(), daily_units, reserve, 0, daily_units)
    return QuotaDay(row["day"], row["units"], row["reserve"], row["spent"], row["units_left"])
