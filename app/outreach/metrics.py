"""The example's gauges (the Plugin's `metrics` hook): today's shared quota, so an alert
can fire when scheduled runs have reached the reserve (docs/operations.md)."""

from __future__ import annotations

from app.outreach import quota
from app.outreach.settings import outreach_settings
from app.plugin import Gauge


async def quota_gauges(db, settings) -> list[Gauge]:
    s = outreach_settings()  # the example's own settings, not the queue's
    day = await quota.today(db, daily_units=s.quota_daily_units, reserve=s.quota_reserve_units)
    return [
        Gauge("quota_used_units", "units of the shared quota spent today (UTC)", day.spent),
        Gauge("quota_daily_units", "units of the shared quota for today", day.units),
        Gauge("quota_reserve_units", "of today's units, those only runs a person starts may spend", day.reserve),
        Gauge("quota_left_units", "units of the shared quota left today", day.units_left),
    ]
