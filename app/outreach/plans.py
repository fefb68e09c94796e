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


PLANS: dict[str, Plan] = {
    "free": Plan("free", "Free", priority=1, daily_pages=50, daily_credits=10),
    "standard": Plan("standard", "Standard", priority=2, daily_pages=500, daily_credits=100),
    "pro": Plan("pro", "Pro", priority=3, daily_pages=5000, daily_credits=1000),
}

# Work with no owner (maintenance, ownerless jobs) queues as the middle plan:
# housekeeping that always loses is housekeeping that never happens.
OWNERLESS_PLAN = "standard"
# A user with no subscription row is on the free plan.
DEFAULT_PLAN = "free"


def priority_sql() -> str:
    """The claim's priority CASE, over the `campaigns` and `subscriptions` joins.

    The only SQL that Python writes: plan names are checked to be plain words,
    and priorities are ints, so nothing outside this module reaches the text.
    """
    whens = []
    for name, plan in PLANS.items():
        if not name.isidentifier() or not isinstance(plan.priority, int):
            raise ValueError(f"plan {name!r} cannot be used in the claim query")
        whens.append(f"WHEN subscriptions.plan = '{name}' THEN {plan.priority}")
    return (
        f"(CASE WHEN campaigns.user_id IS NULL THEN {PLANS[OWNERLESS_PLAN].priority} "
        + " ".join(whens)
        + f" ELSE {PLANS[DEFAULT_PLAN].priority} END)"
    )
