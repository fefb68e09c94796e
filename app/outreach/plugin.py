"""The example as a plug-in (PIPELINE_PLUGINS=app.outreach.plugin:PLUGIN, the default):
its stages, its tenant routes (/campaigns), its CLI commands (campaign, contacts) and,
for `make run`, the sample site with a demo campaign."""

from __future__ import annotations

from app.outreach import STAGES
from app.outreach.commands import add_commands
from app.outreach.dashboard import dashboard_panels
from app.outreach.dashboard import router as plans_router
from app.outreach.metrics import quota_gauges
from app.outreach.routes import router
from app.outreach.sample import allow_sample_site, install_demo
from app.outreach.settings import outreach_settings
from app.plugin import Plugin

outreach_settings()  # read when the plug-in loads: a bad value stops the start, in one line naming it

PLUGIN = Plugin(name="outreach", stages=STAGES, routers=[router, plans_router], commands=add_commands,
                dev_settings=allow_sample_site, dev_setup=install_demo,
                metrics=quota_gauges, dashboard=dashboard_panels)
