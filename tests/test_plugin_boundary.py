"""The queue is the product; the outreach example is one plug-in above it.

Nothing below the plug-in imports it, and a deployment that names only its own stages
gets none of its routes or commands."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
QUEUE_MODULES = sorted(p for p in (REPO / "app").rglob("*.py") if "outreach" not in p.relative_to(REPO).parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return names


@pytest.mark.parametrize("path", QUEUE_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_below_the_plug_in_imports_it(path):
    assert not [m for m in _imports(path) if m == "app.outreach" or m.startswith("app.outreach.")]


def test_the_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from app.outreach.plans import PLANS\n")
    assert _imports(bad) == ["app.outreach.plans"]


# Run in a fresh interpreter: the whole serving stack, built and asked for its routes and
# commands, with only a team's own stages configured.
_PROBE = """
import json, sys
from app.api.main import create_app
from app.cli import _parser
from app.plugin import load_plugins
import app.lambda_handler, app.dev
from app.settings import get_settings
settings = get_settings()
app_ = create_app(settings)
paths = sorted(app_.openapi()["paths"])
commands = sorted(_parser(load_plugins(settings.pipeline_plugins))._subparsers._group_actions[0].choices)
print(json.dumps({"paths": paths, "commands": commands,
                  "stages": [s.type for s in app_.state.runtime.stages],
                  "outreach_loaded": sorted(m for m in sys.modules if m.startswith("app.outreach"))}))
"""


def _probe(**env) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "DATABASE_URL": "postgresql://unused/none", **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_deployment_with_only_its_own_stages_gets_nothing_of_the_example():
    mine = _probe(PIPELINE_PLUGINS="", PIPELINE_STAGES="tests.sample_stages:STAGES")
    assert mine["stages"] == ["echo"]
    # The queue's own batch route is still addressed by lane id under /campaigns/{id}/batches
    # (a lane is a campaign's id today); every route of the example is gone.
    assert [p for p in mine["paths"] if "campaign" in p] == ["/campaigns/{campaign_id}/batches"]
    assert not {"campaign", "contacts", "plan"} & set(mine["commands"])
    assert mine["outreach_loaded"] == []  # not even imported


def test_the_default_deployment_runs_the_example_plug_in():
    default = _probe()
    assert {"brief", "crawl", "extract", "draft"} <= set(default["stages"])
    assert "/campaigns" in default["paths"]
    assert {"campaign", "contacts", "plan"} <= set(default["commands"])
