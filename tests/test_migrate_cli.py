"""Migrations (twice, and two at once) and the CLI's answers to good and bad input."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from app.engine.db import connect
from app.runtime import in_schema
from app.engine.migrate import chain, migrate, pending_migrations


@pytest.fixture
async def empty_db(pg_server):
    admin = await asyncpg.connect(pg_server)
    name = f"skiplock_empty_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rpartition("/")[0]
    yield f"{base}/{name}"
    await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    await admin.close()


async def test_migrate_twice_and_from_two_processes_at_once(empty_db):
    conns = [await connect(empty_db) for _ in range(3)]
    everything = [v for v, _ in chain([])]
    assert await pending_migrations(conns[0], []) == everything
    results = await asyncio.gather(*(migrate(c, []) for c in conns))
    applied = [v for r in results for v in r]
    assert sorted(applied) == sorted(everything)  # each applied exactly once
    assert await migrate(conns[0], []) == []
    assert await pending_migrations(conns[0], []) == []
    for c in conns:
        await c.close()


def cli(*args, env=None, dsn=None):
    full_env = {**os.environ, "PIPELINE_STAGES": "tests.sample_stages:STAGES", **(env or {})}
    if dsn:
        full_env["DATABASE_URL"] = dsn
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=full_env, timeout=60)


def one_line_error(result, needle):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


async def test_cli_enqueue_then_run_once(dsn, pool):
    first = cli("enqueue", "echo", "--payload", '{"message": "hi"}', "--dedupe-key", "greet", dsn=dsn)
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert made["created"] is True and made["job"]["status"] == "pending" and made["job"]["dedupeKey"] == "greet"
    job_id = made["job"]["id"]
    # as POST /jobs answers: not created, and the open job that holds the key
    again = json.loads(cli("enqueue", "echo", "--dedupe-key", "greet", dsn=dsn).stdout)
    assert again["created"] is False and again["job"]["id"] == job_id
    later = json.loads(cli("enqueue", "echo", "--in", "3600", dsn=dsn).stdout)
    wait = await pool.fetchval("SELECT extract(epoch FROM run_after - now()) FROM jobs WHERE id = $1",
                               uuid.UUID(later["job"]["id"]))
    assert 3500 < wait <= 3600
    run = cli("run-once", "--budget", "5", dsn=dsn)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["stopReason"] == "no_work" and summary["jobsDone"] == 1
    assert summary["summary"]["counts"]["echoed"] == 1
    row = await pool.fetchrow("SELECT status, run_id FROM jobs WHERE id = $1", uuid.UUID(job_id))
    assert row["status"] == "done" and str(row["run_id"]) == summary["id"]


@pytest.mark.parametrize("args, needle", [
    (["enqueue", "nope"], "unknown job type 'nope'"),
    (["enqueue", "echo", "--payload", "{oops"], "--payload is not valid JSON"),
    (["enqueue", "echo", "--payload", "[1, 2]"], "must be a JSON object"),
    (["enqueue", "echo", "--lane", "42"], "is not a lane id"),
    (["enqueue", "echo", "--in", "-5"], "--in must be zero or more"),
    (["enqueue", "echo", "--in", "1e300"], "--in must be zero or more"),  # past any date: no overflow
    (["run-once", "--budget", "0"], "--budget must be a positive"),
])
async def test_cli_bad_input_is_one_readable_line(dsn, args, needle):
    one_line_error(cli(*args, dsn=dsn), needle)


@pytest.mark.parametrize("env, needle", [
    ({"PIPELINE_BUDGET_SECONDS": "soon"}, "PIPELINE_BUDGET_SECONDS"),
    ({"PIPELINE_BUDGET_SECONDS": "400"}, "must fit inside PLATFORM_LIMIT_SECONDS"),
    ({"DB_POOL_SIZE": "1"}, "DB_POOL_SIZE"),  # a run needs two: with one, every run waited for ever
    ({"PIPELINE_STAGES": "nowhere.at.all:STAGES"}, "cannot import 'nowhere.at.all'"),
    ({"PIPELINE_STAGES": "tests.sample_stages:MISSING"}, "has no 'MISSING'"),
    ({"PIPELINE_STAGES": "tests.sample_stages:only_ok"}, "only_ok is not a list of Stage"),
    ({"PIPELINE_PLUGINS": "nowhere.at.all:PLUGIN"}, "PIPELINE_PLUGINS: cannot import 'nowhere.at.all'"),
    ({"PIPELINE_PLUGINS": "tests.sample_stages:STAGES"}, "tests.sample_stages:STAGES is not a Plugin"),
    ({"PIPELINE_PLUGINS": "outreach"}, "must look like package.module:NAME"),
])
async def test_cli_bad_settings_are_one_readable_line(dsn, env, needle):
    one_line_error(cli("run-once", env=env, dsn=dsn), needle)


def test_cli_unreachable_database_is_one_line():
    result = cli("migrate", dsn="postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 1, result.stderr  # a failure, not bad input
    assert result.stderr.startswith("error: database") and len(result.stderr.strip().splitlines()) == 1


async def test_own_stage_list_from_pipeline_stages(dsn, pool, tmp_path):
    (tmp_path / "mystages.py").write_text(
        "from app import Stage\n"
        "async def shout(job, ctx):\n"
        "    ctx.count('shouted', len(job.payload['text']))\n"
        "STAGES = [Stage(type='shout', handler=shout)]\n")
    env = {"PIPELINE_STAGES": "mystages:STAGES", "PYTHONPATH": f"{tmp_path}:{os.getcwd()}"}
    assert cli("enqueue", "shout", "--payload", '{"text": "abc"}', env=env, dsn=dsn).returncode == 0
    summary = json.loads(cli("run-once", env=env, dsn=dsn).stdout)
    assert summary["summary"]["counts"]["shouted"] == 3 and summary["jobsDone"] == 1


def installed(*args, cwd, env=None, dsn=None):
    """The installed `skiplock` command (not `python -m`), from the folder `cwd`."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    full_env.update({"PIPELINE_PLUGINS": "", **(env or {})})
    if dsn:
        full_env["DATABASE_URL"] = dsn
    script = os.path.join(os.path.dirname(sys.executable), "skiplock")
    return subprocess.run([script, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=60)


async def test_the_installed_command_finds_a_stage_module_in_the_current_folder(dsn, pool, tmp_path):
    (tmp_path / "teamstages.py").write_text(
        "from app import Stage\n"
        "async def shout(job, ctx):\n"
        "    ctx.count('shouted', len(job.payload['text']))\n"
        "STAGES = [Stage(type='shout', handler=shout)]\n")
    env = {"PIPELINE_STAGES": "teamstages:STAGES"}
    queued = installed("enqueue", "shout", "--payload", '{"text": "abcd"}', cwd=tmp_path, env=env, dsn=dsn)
    assert queued.returncode == 0, queued.stderr
    summary = json.loads(installed("run-once", cwd=tmp_path, env=env, dsn=dsn).stdout)
    assert summary["summary"]["counts"]["shouted"] == 4 and summary["jobsDone"] == 1


def test_a_stage_module_that_cannot_load_is_said_before_any_server_starts(tmp_path):
    result = installed("status", cwd=tmp_path, env={"PIPELINE_STAGES": "nosuchstages:STAGES"})
    assert result.returncode == 2
    assert result.stderr.strip() == "error: PIPELINE_STAGES: cannot import 'nosuchstages': No module named 'nosuchstages'"
    assert not (tmp_path / ".data").exists()  # no embedded server was started for it


def test_a_teams_dotenv_is_read_by_its_commands_and_not_by_the_test_suite(dsn, tmp_path):
    (tmp_path / ".env").write_text("PIPELINE_STAGES=nosuchstages:STAGES\n")
    env = {"SKIPLOCK_ENV_FILE": ".env"}  # what a team's shell has: the default
    read = installed("status", cwd=tmp_path, env=env, dsn=dsn)
    assert read.returncode == 2 and "nosuchstages" in read.stderr
    ignored = installed("status", cwd=tmp_path, dsn=dsn)  # the suite's own environment
    assert ignored.returncode == 0, ignored.stderr


async def test_psql_reaches_the_database_and_url_prints_it(dsn, tmp_path):
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed (make test installs postgresql-15, which brings it)")
    url = installed("psql", "--url", cwd=tmp_path, dsn=dsn)
    # the URL names the queue's schema for its sessions, as every URL the product makes
    assert url.returncode == 0 and url.stdout.strip() == in_schema(dsn, "skiplock")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGPASSWORD")}
    env.update(DATABASE_URL=dsn, PIPELINE_PLUGINS="")
    script = os.path.join(os.path.dirname(sys.executable), "skiplock")
    ran = subprocess.run([script, "psql"], input="SELECT 'hello from ' || current_database();\n",
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "hello from " + dsn.rpartition("/")[2] in ran.stdout
    assert dsn.split("@")[0].rpartition(":")[2] not in " ".join(ran.args)  # the password is not on the command line


async def test_the_readmes_stage_runs_as_pasted(dsn, pool, tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("## Write a stage"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("\n```", start)]
    (tmp_path / "mystages.py").write_text(code + "\n")
    env = {"PIPELINE_STAGES": "mystages:STAGES"}
    bad = installed("enqueue", "invoice", "--payload", '{"to": 5}', cwd=tmp_path, env=env, dsn=dsn)
    assert bad.returncode == 2 and "to" in bad.stderr  # the payload's model is the README's
    good = installed("enqueue", "invoice", "--payload", '{"to": "a@b.c"}', cwd=tmp_path, env=env, dsn=dsn)
    assert good.returncode == 0, good.stderr
    summary = json.loads(installed("run-once", cwd=tmp_path, env=env, dsn=dsn).stdout)
    assert summary["jobsDone"] == 1 and summary["summary"]["counts"]["invoices_sent"] == 1


async def test_a_retry_of_a_job_no_loaded_stage_handles_says_so(dsn, pool):
    # a typo in a plain INSERT, or a plug-in left out: it would wait for ever
    job_id = await pool.fetchval("INSERT INTO jobs (type, status, attempts, finished_at, last_error) "
                                 "VALUES ('ehco', 'failed', 3, now(), 'x') RETURNING id")
    result = cli("jobs", "retry", str(job_id), dsn=dsn)
    assert result.returncode == 2 and "no stage loaded here handles type 'ehco'" in result.stderr, result.stderr
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id) == "failed"
