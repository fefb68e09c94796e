"""GET /plans: every plan, first in line first, from the same PLANS the claim's priority
comes from (the JSON is app/outreach/dashboard.py's plan_json)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.params import only_params
from app.outreach.dashboard import plan_json, plans_by_priority
from app.outreach.settings import outreach_settings

router = APIRouter(tags=["campaigns"])


@router.get("/plans", summary="The plans: queue order, allowances and quota shares")
async def list_plans(request: Request) -> JSONResponse:
    """Every plan, first in line first: its queue row ("First in line", "Ahead of Free"),
    the priority the claim ranks its lanes by, its daily allowances and its share of the
    shared quota (in percent and in today's units)."""
    only_params()(request)
    units = outreach_settings().quota_daily_units
    return JSONResponse({"data": [plan_json(p, units) for p in plans_by_priority()]})
