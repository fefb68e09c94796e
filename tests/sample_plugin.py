"""A plug-in for tests (PIPELINE_PLUGINS=tests.sample_plugin:PLUGIN): the echo stage of
tests/sample_stages.py, and a tenant route (tests/sample_routes.py) imported only when the
web app is built, as a plug-in's routes should be."""

from app.plugin import Plugin
from tests.sample_stages import STAGES


def _routers():
    from tests.sample_routes import router

    return [router]


PLUGIN = Plugin(name="sample", stages=STAGES, routers=_routers)
