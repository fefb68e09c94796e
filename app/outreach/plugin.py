"""The example as a plug-in (PIPELINE_PLUGINS=app.outreach.plugin:PLUGIN, the default):
its stages, its SQL (app/outreach/sql/), its tenant routes (/campaigns, /plans), its CLI
commands (campaign, contacts) and, for `make run`, the sample site with a demo campaign.

Loading it imports the stages and what they need, not FastAPI or Starlette: the routes
and the sample site are imported when the web app or `make run` asks for them, so a
scheduled Lambda invocation and the CLI start without the web stack."""

from __future__ import annotations

from typing import Any

from app.outreach import STAGES
from app.outreach.commands import add_commands
from app.outreach.dashboard import dashboard_panels
from app.outreach.metrics import quota_gauges
from app.outreach.settings import outreach_settings
from app.outreach.sql import SQL
from app.plugin import Plugin

outreach_settings()  # read when the plug-in loads: a bad value stops the start, in one line naming it


def _routers() -> list[Any]:
    from app.outreach.plans_route import router as plans_router
    from app.outreach.routes import router

    return [router, plans_router]


def _dev_settings(settings) -> dict[str, Any]:
    from app.outreach.sample import allow_sample_site

    return allow_sample_site(settings)


async def _dev_setup(app, pool, settings) -> Any:
    from app.outreach.sample import install_demo

    return await install_demo(app, pool, settings)


PLUGIN = Plugin(name="outreach", stages=STAGES, sql=SQL, routers=_routers, commands=add_commands,
                dev_settings=_dev_settings, dev_setup=_dev_setup,
                metrics=quota_gauges, dashboard=dashboard_panels)
