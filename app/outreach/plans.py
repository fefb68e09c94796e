"""The plans, in one object. The claim order and anything that shows plans render from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    name: str
    label: str
    priority: int       # higher is claimed first when there is a backlog
    daily_pages: int    # pages one campaign may fetch per UTC day
    daily_credits: int  # drafts (paid work) per UTC day
    max_campaigns: int  # campaigns one owner may have
    quota_share_percent: int  # of the shared daily quota, what one owner's campaigns may spend

    def quota_share(self, daily_units: int) -> int:
        """Units of a day's shared quota one owner on this plan may spend (rounded up, so
        any quota at all leaves each owner at least one unit)."""
        return -(-daily_units * self.quota_share_percent // 100)


PLANS: dict[str, Plan] = {
    "free": Plan("free", "Free", priority=1, daily_pages=50, daily_credits=10,
                 max_campaigns=3, quota_share_percent=10),
    "standard": Plan("standard", "Standard", priority=2, daily_pages=500, daily_credits=100,
                     max_campaigns=20, quota_share_percent=25),
    "pro": Plan("pro", "Pro", priority=3, daily_pages=5000, daily_credits=1000,
                max_campaigns=200, quota_share_percent=50),
}

# Work with no owner (maintenance, ownerless jobs) queues as the middle plan:
# housekeeping that always loses is housekeeping that never happens.
OWNERLESS_PLAN = "standard"
# A user with no subscription row is on the free plan.
DEFAULT_PLAN = "free"

