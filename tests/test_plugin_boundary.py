"""The queue is the product; the outreach example is one plug-in above it.

Nothing below the plug-in imports it, and a deployment that names only its own stages
gets none of its routes, commands or tables."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from app.engine import accounts
from app.engine.db import connect
from app.engine.tenancy import Actor, act_as
from app.engine.migrate import chain, migrate

REPO = Path(__file__).resolve().parent.parent
QUEUE_MODULES = sorted(p for p in (REPO / "app").rglob("*.py") if "outreach" not in p.relative_to(REPO).parts)
# The queue's own tests: everything under tests/ but the example's folder
QUEUE_TESTS = sorted(p for p in (REPO / "tests").rglob("*.py") if "outreach" not in p.relative_to(REPO / "tests").parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return names


@pytest.mark.parametrize("path", QUEUE_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_below_the_plug_in_imports_it(path):
    assert not [m for m in _imports(path) if m == "app.outreach" or m.startswith("app.outreach.")]


@pytest.mark.parametrize("path", QUEUE_TESTS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_queues_tests_do_not_import_the_example(path):
    # they make users, keys and lanes with tests/factories.py; the example's tests are in tests/outreach
    assert not [m for m in _imports(path) if m == "app.outreach" or m.startswith("app.outreach.")
                or m == "tests.outreach" or m.startswith("tests.outreach.")]


# Collects the queue's tests as `make test` runs them, in a fresh interpreter, and says
# which of the example's modules that imported.
_COLLECT = """
import json, sys
import pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "tests", "--ignore=tests/outreach"])
print(json.dumps({"code": int(code), "loaded": sorted(m for m in sys.modules if m.startswith("app.outreach"))}))
"""


def test_collecting_the_queues_tests_loads_nothing_of_the_example():
    done = subprocess.run([sys.executable, "-c", _COLLECT], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PIPELINE_PLUGINS": ""}, timeout=300)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, done.stdout[-3000:]
    assert result["loaded"] == []


def test_the_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from app.outreach.plans import PLANS\n")
    assert _imports(bad) == ["app.outreach.plans"]


def _reaches(module: str) -> set[str]:
    """The example's modules `module` imports, directly or through others, functions' own
    imports included (app.outreach itself, the package, left out: it names every stage)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        path = REPO / (todo.pop().replace(".", "/") + ".py")
        for name in _imports(path):
            is_module = (REPO / (name.replace(".", "/") + ".py")).exists()
            if name.startswith("app.outreach.") and is_module and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_the_examples_web_client_never_imports_its_demo_site():
    # the demo site seeds a campaign through the stages that use the client: a circle
    assert "app.outreach.sample" not in _reaches("app.outreach.web")
    assert "app.outreach.web" in _reaches("app.outreach.sample")  # the check sees through the stages


# Run in a fresh interpreter: the whole serving stack, built and asked for its routes and
# commands, with only a team's own stages configured.
_PROBE = """
import json, sys
from app.api.main import create_app
from app.cli.command import _parser
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


def _probe(**env: str | None) -> dict:
    """The probe's answer with `env` on top of the test's (None: unset)."""
    values = {**os.environ, "DATABASE_URL": "postgresql://unused/none", **env}
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=REPO,
                          env={k: v for k, v in values.items() if v is not None})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_deployment_with_only_its_own_stages_gets_nothing_of_the_example():
    mine = _probe(PIPELINE_PLUGINS="", PIPELINE_STAGES="tests.sample_stages:STAGES")
    assert mine["stages"] == ["echo"]
    # the queue's routes speak of lanes; every route of the example is gone
    assert "/lanes/{lane_id}/batches" in mine["paths"]
    assert [p for p in mine["paths"] if "campaign" in p] == []
    assert not {"campaign", "contacts", "plan"} & set(mine["commands"])
    assert mine["outreach_loaded"] == []  # not even imported


def test_a_plug_in_of_ones_own_brings_its_stages_and_routes():
    sample = _probe(PIPELINE_PLUGINS="tests.sample_plugin:PLUGIN")
    assert sample["stages"] == ["echo"] and "/sample/hello" in sample["paths"]
    assert sample["outreach_loaded"] == []


def test_the_default_deployment_runs_the_example_plug_in():
    default = _probe(PIPELINE_PLUGINS=None)  # unset, as a deployment that names none
    assert {"brief", "crawl", "extract", "draft"} <= set(default["stages"])
    assert {"/campaigns", "/campaigns/{campaign_id}/batches"} <= set(default["paths"])
    assert {"campaign", "contacts", "plan"} <= set(default["commands"])


async def test_a_queue_without_the_plug_in_has_no_campaign_tables_until_it_names_it(new_database):
    db = await connect(await new_database())
    try:
        assert await migrate(db, []) == [v for v, _ in chain([])]
        tables = {r["tablename"] for r in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        assert {"jobs", "lanes", "batches", "users", "api_keys", "audit_log"} <= tables
        assert not tables & {"campaigns", "subscriptions", "pages", "contacts", "drafts", "credit_ledger"}
        # a plain INSERT names any lane; the queue makes its row, ownerless, priority 0
        lane = uuid.uuid4()
        await db.execute("INSERT INTO jobs (type, lane) VALUES ('t', $1)", lane)
        assert tuple(await db.fetchrow("SELECT owner_id, priority, paused FROM lanes WHERE id = $1", lane)) \
            == (None, 0, False)
        # the queue's own accounts need nothing of the example: a user and an admin key
        # (what `make run` makes first) on a database without its tables
        async with db.transaction():
            await act_as(db, Actor("system", "make run"))
            await accounts.add_user(db, "ops@example.com")
            key = (await accounts.create_key(db, "ops@example.com", admin=True)).key
        assert (await accounts.authenticate(db, key)) is not None
    finally:
        await db.close()
