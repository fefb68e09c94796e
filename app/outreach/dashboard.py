"""The example's part of the dashboard (the Plugin's `dashboard` hook) and the plans'
JSON that GET /plans answers (app/outreach/plans_route.py).

Both render from PLANS, the object the claim's priority comes from, so the plan table a
person reads and the order the queue serves are one and the same. The shared quota is
one number for everyone (the API roles may read its row); allowances are per account and
read as the tenant (row-level security: a tenant its own, an admin everyone's). Both on
the request's own connection: a second one from the pool, taken while the request holds
its transaction, can wait for ever once every connection is held that way."""

from __future__ import annotations

from typing import Any

from app.outreach import quota
from app.outreach.plans import DEFAULT_PLAN, PLANS, Plan
from app.outreach.settings import outreach_settings
from app.outreach.sql import statement

ACCOUNTS_SHOWN = 50


def queue_row(plan: Plan) -> str:
    """Where a plan's work stands in the queue, in words: 'First in line', 'Ahead of Free'."""
    ranked = sorted(PLANS.values(), key=lambda p: p.priority, reverse=True)
    behind = [p.label for p in ranked if p.priority < plan.priority]
    ahead = [p.label for p in ranked if p.priority > plan.priority]
    if not ahead:
        return "First in line"
    if behind:
        return f"Ahead of {' and '.join(reversed(behind))}"
    return f"After {' and '.join(ahead)}"


def plan_json(plan: Plan, daily_units: int) -> dict[str, Any]:
    return {"name": plan.name, "label": plan.label, "priority": plan.priority, "queue": queue_row(plan),
            "dailyPages": plan.daily_pages, "dailyCredits": plan.daily_credits,
            "maxCampaigns": plan.max_campaigns, "quotaSharePercent": plan.quota_share_percent,
            "quotaShareUnits": plan.quota_share(daily_units)}


def plans_by_priority() -> list[Plan]:
    return sorted(PLANS.values(), key=lambda p: p.priority, reverse=True)


async def dashboard_panels(db, actor, settings) -> list[dict[str, Any]]:
    s = outreach_settings()
    day = await quota.today(db, daily_units=s.quota_daily_units, reserve=s.quota_reserve_units)
    panels = [{
        "title": "Shared quota today",
        "note": f"UTC day {day.day.isoformat()}; scheduled runs stop at the reserve, runs a person starts may use it.",
        "columns": ["Left", "Spent", "Daily units", "Reserve"],
        "rows": [[day.units_left, day.spent, day.units, day.reserve]],
    }]
    rows = []
    for r in await db.fetch(*statement("dashboard_allowances").bind(limit=ACCOUNTS_SHOWN)):
        plan = PLANS.get(r["plan"] or DEFAULT_PLAN, PLANS[DEFAULT_PLAN])
        share = plan.quota_share(s.quota_daily_units)
        rows.append([r["email"], plan.label, f"{r['quota_spent']} of {share}", max(share - r["quota_spent"], 0),
                     r["pages"], r["credits"]])
    panels.append({
        "title": "Allowances today",
        "columns": ["Account", "Plan", "Quota used", "Quota left", "Pages", "Drafts"],
        "rows": rows,
    })
    panels.append({
        "title": "Plans",
        "note": "The queue serves higher plans first when there is a backlog (the same PLANS as GET /plans).",
        "columns": ["Plan", "Queue", "Priority", "Pages a day", "Drafts a day", "Campaigns", "Quota share"],
        "rows": [[p.label, queue_row(p), p.priority, p.daily_pages, p.daily_credits, p.max_campaigns,
                  f"{p.quota_share_percent} %"] for p in plans_by_priority()],
    })
    return panels
