"""The Lambda entry point, invoked in-process with recorded events, against the real Postgres.

Each invocation runs in a worker thread (Lambda calls the handler synchronously, and
the handler drives its own event loop), while the test seeds and checks the database
from the test's loop."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from serving_kit import SECRET, Recorder, make_settings, seed

import app.lambda_handler as lambda_module
from app.lambda_handler import LambdaApp, is_scheduled_event
from app.settings import Settings, get_settings
from tests.lambda_context import LambdaContext

EVENTS = Path(__file__).parent / "events"


def event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


@pytest.fixture
async def lambda_app(dsn):
    made: list[LambdaApp] = []

    def make(stages, **overrides) -> LambdaApp:
        made.append(LambdaApp(make_settings(dsn, **overrides), stages))
        return made[-1]

    yield make
    for lam in made:
        await asyncio.to_thread(lam.loop.run_until_complete, lam.runtime.close())
        lam.loop.close()


async def invoke(handler, ev: dict, context: LambdaContext) -> dict:
    return await asyncio.to_thread(handler, ev, context)


def test_the_recorded_events_are_told_apart():
    assert is_scheduled_event(event("scheduled"))
    assert not is_scheduled_event(event("function_url"))
    assert not is_scheduled_event({"source": "aws.events", "detail-type": "Object Created"})


async def test_function_url_event_runs_the_pipeline(lambda_app, pool, recorder):
    ids = await seed(pool, 6)
    lam = lambda_app([recorder.stage])
    response = await invoke(lam, event("function_url"), LambdaContext(300))
    assert response["statusCode"] == 200, response
    body = json.loads(response["body"])
    assert body["trigger"] == "http"
    assert body["stopReason"] == "no_work"
    assert body["budgetSeconds"] == 30  # ?budget=30 in the recorded URL
    assert body["summary"]["stages"]["record"]["done"] == 6
    assert sorted(recorder.seen) == sorted(ids)
    row = await pool.fetchrow("SELECT trigger, stop_reason, finished_at FROM runs WHERE id = $1::uuid",
                              body["id"])
    assert row["trigger"] == "http" and row["stop_reason"] == "no_work" and row["finished_at"]


async def test_function_url_event_without_the_secret_is_401(lambda_app, pool, recorder):
    ev = copy.deepcopy(event("function_url"))
    ev["headers"]["authorization"] = "Bearer guess"
    response = await invoke(lambda_app([recorder.stage]), ev, LambdaContext(300))
    assert response["statusCode"] == 401
    assert json.loads(response["body"])["error"]["code"] == "unauthorized"
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0


async def test_scheduled_event_runs_the_pipeline_as_cron(lambda_app, pool, recorder):
    ids = await seed(pool, 4)
    lam = lambda_app([recorder.stage])
    body = await invoke(lam, event("scheduled"), LambdaContext(300))
    assert body["trigger"] == "cron"
    assert body["stopReason"] == "no_work"
    assert body["budgetSeconds"] == 220  # min(PIPELINE_BUDGET_SECONDS, 300 - 60)
    assert body["jobsDone"] == 4 and body["quotaUnits"] == 0  # the run's one shape (app.runtime.run_json)
    assert sorted(recorder.seen) == sorted(ids)
    row = await pool.fetchrow("SELECT * FROM runs WHERE id = $1::uuid", body["id"])
    assert row["trigger"] == "cron" and row["stop_reason"] == "no_work"
    assert row["summary"]["stages"]["record"]["done"] == 4


async def test_the_budget_is_capped_by_the_remaining_time(lambda_app, pool, recorder):
    lam = lambda_app([recorder.stage], lambda_safety_margin_seconds=60)
    body = await invoke(lam, event("scheduled"), LambdaContext(100))
    assert 39 <= body["budgetSeconds"] <= 40  # 100 s left - 60 s margin

    ev = copy.deepcopy(event("function_url"))
    ev["rawQueryString"], ev["queryStringParameters"] = "budget=200", {"budget": "200"}
    response = await invoke(lam, ev, LambdaContext(90))
    assert 29 <= json.loads(response["body"])["budgetSeconds"] <= 30


async def test_too_little_time_left_claims_nothing_but_records_the_run(lambda_app, pool, recorder):
    ids = await seed(pool, 3)
    lam = lambda_app([recorder.stage], lambda_safety_margin_seconds=60)
    body = await invoke(lam, event("scheduled"), LambdaContext(30))
    assert body["budgetSeconds"] == 0
    assert body["stopReason"] == "time_budget"
    assert recorder.seen == []
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending' AND id = ANY($1::uuid[])",
                               ids) == 3
    assert await pool.fetchval("SELECT finished_at IS NOT NULL FROM runs WHERE id = $1::uuid", body["id"])


async def test_the_pool_is_reused_across_invocations(lambda_app, pool):
    slow = Recorder()
    lam = lambda_app([slow.stage])
    await seed(pool, 2)
    first = await invoke(lam, event("scheduled"), LambdaContext(300))
    the_pool = lam.runtime._pool
    assert the_pool is not None
    await seed(pool, 3)
    second = await invoke(lam, event("function_url"), LambdaContext(300))
    third = await invoke(lam, event("scheduled"), LambdaContext(300))
    assert lam.runtime._pool is the_pool
    assert lam.runtime.pools_created == 1
    assert not the_pool._closed  # Mangum ran no lifespan shutdown
    assert first["summary"]["stages"]["record"]["done"] == 2
    assert json.loads(second["body"])["summary"]["stages"]["record"]["done"] == 3
    assert third["stopReason"] == "no_work"
    assert await pool.fetchval("SELECT count(*) FROM runs WHERE finished_at IS NOT NULL") == 3


async def test_the_module_level_handler_keeps_its_app_between_invocations(monkeypatch, dsn, pool):
    """app.lambda_handler.handler as Lambda calls it: settings from the environment."""
    monkeypatch.setenv("DATABASE_URL", dsn)
    monkeypatch.setenv("CRON_SECRET", SECRET)
    monkeypatch.setenv("RUN_SCHEDULER", "false")
    monkeypatch.setattr(lambda_module, "_instance", None)
    get_settings.cache_clear()
    root = logging.getLogger()
    saved = root.handlers[:], root.level  # the handler sets up JSON logs for the process
    try:
        first = await invoke(lambda_module.handler, event("scheduled"), LambdaContext(300))
        instance = lambda_module._instance
        second = await invoke(lambda_module.handler, event("scheduled"), LambdaContext(300))
        response = await invoke(lambda_module.handler, event("function_url"), LambdaContext(300))
        assert lambda_module._instance is instance
        assert instance.runtime.pools_created == 1
        assert first["trigger"] == second["trigger"] == "cron"
        assert response["statusCode"] == 200
        assert json.loads(response["body"])["trigger"] == "http"
        triggers = sorted(r["trigger"] for r in await pool.fetch("SELECT trigger FROM runs"))
        assert triggers == ["cron", "cron", "http"]
    finally:
        get_settings.cache_clear()
        instance = lambda_module._instance
        if instance is not None:
            await asyncio.to_thread(instance.loop.run_until_complete, instance.runtime.close())
            instance.loop.close()
        root.handlers[:], level = saved
        root.setLevel(level)


# In a fresh interpreter: the handler's module imported and the scheduled event (argv[1])
# handled as Lambda calls it; what follows prints what the test looks at.
_INVOKE_SCHEDULED = """
import json, sys
import app.lambda_handler as h

class Context:
    aws_request_id = "fresh"
    def get_remaining_time_in_millis(self):
        return 300_000

body = h.handler(json.loads(sys.argv[1]), Context())
"""

# A deployment with a plug-in that brings routes (tests/sample_plugin.py): which web
# modules the schedule loaded.
_SCHEDULED_COLD = _INVOKE_SCHEDULED + """
print(json.dumps({"trigger": body["trigger"], "stopReason": body["stopReason"],
                  "web": sorted(m for m in ("fastapi", "starlette", "mangum", "app.api", "tests.sample_routes")
                                if m in sys.modules)}))
"""


def test_a_scheduled_invocation_loads_no_web_stack(dsn):
    """The schedule runs a plug-in's stages without FastAPI, Starlette or Mangum: the
    plug-in's routes are imported only when an HTTP event builds the app."""
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_BUDGET_SECONDS": "5", "PIPELINE_PLUGINS":
           "tests.sample_plugin:PLUGIN"}
    done = subprocess.run([sys.executable, "-c", _SCHEDULED_COLD, json.dumps(event("scheduled"))],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["trigger"] == "cron" and out["stopReason"] == "no_work"
    assert out["web"] == []


async def test_an_event_that_is_neither_the_schedule_nor_http_is_refused_not_raised(lambda_app, pool, recorder):
    """Mangum raised on anything it could not read (the console's test event `{}`, SQS, a
    WebSocket route, a Function URL event without headers): an unhandled error with a
    traceback for Lambda, and a retry of an async invocation."""
    await seed(pool, 2)
    lam = lambda_app([recorder.stage])
    no_headers = copy.deepcopy(event("function_url"))
    no_headers["headers"] = None
    for ev in ({}, None, [], "tick", {"source": "aws.events", "detail-type": "Object Created"},
               {"Records": [{"eventSource": "aws:sqs", "body": "{}"}]},
               {"requestContext": {"routeKey": "$connect", "eventType": "CONNECT"}}, no_headers):
        answer = await invoke(lam, ev, LambdaContext(300))
        assert answer["statusCode"] == 400, (ev, answer)
        assert json.loads(answer["body"])["error"]["code"] == "unsupported_event"
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0 and recorder.seen == []


async def test_a_scheduled_tick_with_the_database_unreachable_answers_and_does_not_raise(dsn, recorder):
    """The schedule's run could not reach the database: DatabaseUnavailable escaped the
    handler (Lambda records an unhandled error and retries the async invocation)."""
    settings = make_settings("postgresql://nobody@127.0.0.1:1/none")
    lam = LambdaApp(settings, [recorder.stage])
    try:  # little time left, so the wait for the database is short
        answer = await invoke(lam, event("scheduled"), LambdaContext(settings.finish_margin_seconds + 1))
    finally:
        await asyncio.to_thread(lam.loop.run_until_complete, lam.runtime.close())
        lam.loop.close()
    assert answer["statusCode"] == 503
    assert json.loads(answer["body"])["error"]["code"] == "database_unavailable"


class UnsureContext(LambdaContext):
    def get_remaining_time_in_millis(self) -> int:
        raise RuntimeError("no deadline here")


async def test_a_context_that_cannot_say_its_time_left_runs_under_the_platform_limit(lambda_app, pool, recorder):
    ids = await seed(pool, 2)
    lam = lambda_app([recorder.stage])
    body = await invoke(lam, event("scheduled"), UnsureContext())
    assert body["stopReason"] == "no_work" and body["budgetSeconds"] == 220
    assert sorted(recorder.seen) == sorted(ids)


# A team's stages outside this repository, packaged as `make package` packages them and
# run by the Lambda handler from nothing but the unzipped package.
_TEAM_STAGES = """
from app import Stage
from teamlib.words import GREETING

async def greet(job, ctx):
    ctx.count(GREETING)

STAGES = [Stage(type="greet", handler=greet)]
"""

_SCHEDULED_FROM_THE_PACKAGE = _INVOKE_SCHEDULED + """
print(json.dumps({"body": body, "files": [sys.modules[m].__file__ for m in ("app", "mystages", "teamlib")]}))
"""


def _env_without_the_stage_settings(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIPELINE_STAGES", "PIPELINE_PLUGINS")}
    return {**env, **values}


def _package(folder: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    """python -m app.lambda_package run from the team's folder, reading its .env."""
    return subprocess.run([sys.executable, "-m", "app.lambda_package", "--no-deps", "--out", str(out), *args],
                          cwd=folder, env=_env_without_the_stage_settings(SKIPLOCK_ENV_FILE=".env"),
                          capture_output=True, text=True, timeout=120)


async def test_a_teams_own_stages_reach_lambda_in_the_package(dsn, pool, tmp_path):
    team, teamlib = tmp_path / "team", tmp_path / "common" / "teamlib"
    teamlib.mkdir(parents=True)
    team.mkdir()
    (team / "mystages.py").write_text(_TEAM_STAGES)
    (team / ".env").write_text("PIPELINE_STAGES=mystages:STAGES\nPIPELINE_PLUGINS=\n")
    (teamlib / "__init__.py").write_text("")
    (teamlib / "words.py").write_text('GREETING = "greeted"\n')
    built = _package(team, tmp_path / "lambda.zip", "--include", "../common/teamlib")
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(tmp_path / "lambda.zip") as zf:
        assert {"mystages.py", "teamlib/__init__.py", "teamlib/words.py"} <= set(zf.namelist())
        zf.extractall(tmp_path / "unzipped")

    ids = await seed(pool, 3, type_="greet")
    unzipped = tmp_path / "unzipped"
    env = _env_without_the_stage_settings(DATABASE_URL=dsn, PIPELINE_STAGES="mystages:STAGES", PIPELINE_PLUGINS="")
    ran = subprocess.run([sys.executable, "-c", _SCHEDULED_FROM_THE_PACKAGE, json.dumps(event("scheduled"))],
                         cwd=unzipped, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert all(Path(f).is_relative_to(unzipped) for f in out["files"]), out["files"]  # the zip's, not the team's
    assert out["body"]["trigger"] == "cron" and out["body"]["jobsDone"] == 3
    assert out["body"]["summary"]["counts"]["greeted"] == 3
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE id = ANY($1::uuid[]) AND status = 'done'", ids) == 3


@pytest.mark.parametrize("env_file, args, says", [
    ("PIPELINE_STAGES=mystages:STAGES\n", (), "PIPELINE_STAGES names the module 'mystages'"),
    ("PIPELINE_PLUGINS=teamplugins.plugin:PLUGIN\n", (), "PIPELINE_PLUGINS names the module 'teamplugins'"),
    ("PIPELINE_PLUGINS=\n", ("--include", "../elsewhere/helpers.py"), "--include ../elsewhere/helpers.py: no module"),
    ("PIPELINE_PLUGINS=\n", ("--include", "helpers"), "--include helpers: no module or package 'helpers'"),
])
def test_a_name_found_nowhere_stops_the_package_in_one_line(tmp_path, env_file, args, says):
    team = tmp_path / "team"
    team.mkdir()
    (team / ".env").write_text(env_file)
    built = _package(team, tmp_path / "lambda.zip", *args)
    assert built.returncode == 2
    assert built.stderr.startswith(f"error: {says}") and built.stderr.count("\n") == 1, built.stderr
    assert not (tmp_path / "lambda.zip").exists()


def test_serverless_passes_the_stage_settings_to_the_function():
    """What the package was built with reaches the function: from the deploy shell or .env;
    unset, the settings' own defaults."""
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "serverless.yml").read_text())
    env = config["provider"]["environment"]
    assert config["useDotenv"] is True
    assert env["PIPELINE_STAGES"] == "${env:PIPELINE_STAGES, ''}"
    default_plugins = Settings.model_fields["pipeline_plugins"].default
    assert env["PIPELINE_PLUGINS"] == f"${{env:PIPELINE_PLUGINS, '{default_plugins}'}}"
