"""`skiplock`: the operator's job, run and status commands against the real database,
their one-line errors, and the embedded server a command starts and stops. The
installed script runs as a subprocess where the process matters (exit codes, the
embedded server, one full command); the rest call the same main() in-process, since
every start of Python here costs a second or more."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from app.devdb import LocalPostgres
from app.settings import load_settings
from app.engine import job_admin
from app.engine.jobs import NewJob, enqueue_many
from app.pipeline.loop import Pipeline
from tests import factories
from app.pipeline.maintenance import schedule_periodic
from tests.sample_stages import STAGES, WITH_SCHEDULES

SKIPLOCK = str(Path(".venv/bin/skiplock").resolve())


def skiplock(*args, dsn: str | None, env: dict | None = None, **run) -> subprocess.CompletedProcess:
    """The installed script; `run`: subprocess.run's own arguments (stdout, say)."""
    full = {**os.environ, "PIPELINE_PLUGINS": "", "PIPELINE_STAGES": "tests.sample_stages:STAGES",
            "PYTHONPATH": os.getcwd(), **(env or {})}  # an installed script does not look in the cwd
    full.pop("DATABASE_URL", None)
    if dsn:
        full["DATABASE_URL"] = dsn
    return subprocess.run([SKIPLOCK, *args], **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **run},
                          text=True, env=full, timeout=120)


def ok_json(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_line(result: subprocess.CompletedProcess, code: int, needle: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


async def _failed(pool, n: int, **kw) -> list[uuid.UUID]:
    ids = await factories.jobs(pool, "echo", n, **kw)
    await pool.execute("UPDATE jobs SET status = 'failed', attempts = 3, last_error = 'boom', "
                       "finished_at = now() WHERE id = ANY($1)", ids)
    return ids


async def test_jobs_runs_and_status_commands(dsn, pool, cli):
    failed = await _failed(pool, 3)
    cancelled = await _failed(pool, 1)
    await pool.execute("UPDATE jobs SET status = 'cancelled' WHERE id = $1", cancelled[0])
    pending = await factories.jobs(pool, "echo", 2)
    done = await factories.jobs(pool, "echo", 4)  # status counts the jobs' own statuses
    await pool.execute("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now() WHERE id = ANY($1)", done)
    run_id = await factories.run(pool, "cron")
    await pool.execute("UPDATE runs SET finished_at = started_at + interval '3 seconds', stop_reason = 'no_work', "
                       "jobs_done = 4, summary = '{\"stages\": {\"echo\": {\"done\": 4, \"failed\": 1, "
                       "\"deferred\": 0}}}' WHERE id = $1", run_id)

    # a page of failed jobs, and the next one from its cursor: newest first, nothing twice, no cancel
    first = ok_json(await cli("jobs", "ls", "--status", "failed", "--limit", "2", "--json"))
    assert len(first["data"]) == 2 and first["nextCursor"]
    rest = ok_json(await cli("jobs", "ls", "--status", "failed", "--after", first["nextCursor"], "--json"))
    seen = [j["id"] for j in first["data"] + rest["data"]]
    assert sorted(seen) == sorted(str(i) for i in failed) and rest["nextCursor"] is None

    # one retry, then the rest in bulk: cancelled jobs stay cancelled unless asked
    one = ok_json(await cli("jobs", "retry", str(failed[0]), "--json"))
    assert one["status"] == "pending" and one["attempts"] == 0
    bulk = ok_json(await cli("jobs", "retry", "--failed", "--type", "echo", "--since", "1h", "--json"))
    assert bulk == {"retried": 2, "byType": {"echo": 2}}
    statuses = dict(await pool.fetch("SELECT id, status FROM jobs WHERE id = ANY($1)", failed + cancelled))
    assert [statuses[i] for i in failed] == ["pending"] * 3 and statuses[cancelled[0]] == "cancelled"

    # cancel a pending job; again, it is a failure in one line (exit 1)
    cancel = await cli("jobs", "cancel", str(pending[0]))
    assert cancel.returncode == 0 and "cancelled" in cancel.stdout, cancel.stderr
    one_line(await cli("jobs", "cancel", str(pending[0])), 1, "has already ended (cancelled)")

    status = ok_json(skiplock("status", "--json", dsn=dsn))  # the installed script, once
    echo = next(s for s in status["stages"] if s["type"] == "echo")
    true_pending = await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'echo' AND status = 'pending'")
    assert echo["pending"] == true_pending == 4 and echo["running"] == 0
    # failed and cancelled: the jobs' own statuses (the failed ones were all retried)
    assert (echo["doneLastDay"], echo["failedLastDay"], echo["cancelledLastDay"]) == (4, 0, 2)
    assert [r["id"] for r in status["lastRuns"]] == [str(run_id)]
    table = await cli("runs", "ls")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == ["ID", "TRIGGER", "STOP"]
    assert str(run_id) in table.stdout and "no_work" in table.stdout

    # what the CLI changed is in the audit log as system/cli; the pipeline's own work is not
    enqueued = ok_json(await cli("enqueue", "echo"))["job"]["id"]
    audit = await pool.fetch("SELECT actor_kind, actor_id, op, row_id, new_row ->> 'status' AS status "
                             "FROM audit_log WHERE table_name = 'jobs'")
    assert {(a["actor_kind"], a["actor_id"]) for a in audit} == {("system", "cli")}
    assert {(a["row_id"], a["op"], a["status"]) for a in audit} == {
        *((str(i), "UPDATE", "pending") for i in failed), (str(pending[0]), "UPDATE", "cancelled"),
        (enqueued, "INSERT", "pending")}
    worked = await Pipeline(pool, STAGES, load_settings(database_url=dsn, pipeline_plugins="")).run("cron")
    assert worked.jobs_done == 5
    assert await pool.fetchval("SELECT count(*) FROM audit_log WHERE table_name = 'jobs'") == len(audit)


async def test_bad_input_and_missing_rows_are_one_line(dsn, cli):
    one_line(skiplock("jobs", "show", "nope", dsn=dsn), 2, "job id 'nope' is not a uuid")  # the script's exit code
    one_line(await cli("jobs", "show", str(uuid.UUID(int=5))), 1, f"no job {uuid.UUID(int=5)}")
    one_line(await cli("jobs", "retry", "--failed", "--type", "nosuch"), 2, "unknown job type 'nosuch'")
    one_line(await cli("jobs", "retry"), 2, "give a job id, or --failed")
    one_line(await cli("runs", "ls", "--limit", "0"), 2, "--limit must be a whole number")


async def test_bulk_retry_leaves_dedupe_keys_whole(pool):
    """Failed jobs whose key an open job holds stay failed; of failed jobs sharing a key,
    only the newest is retried (the unique index on open keys would refuse the rest)."""
    held = await _failed(pool, 1, dedupe_key="held")
    await factories.jobs(pool, "echo", 1, dedupe_key="held")  # open: holds the key
    shared = [*await _failed(pool, 1, dedupe_key="shared"), *await _failed(pool, 1, dedupe_key="shared")]
    await pool.execute("UPDATE jobs SET finished_at = now() - interval '1 minute' WHERE id = $1", shared[0])
    retried = {r["id"] for r in await job_admin.retry_failed_jobs(pool)}
    assert retried == {shared[1]}
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", held[0]) == "failed"


def test_a_command_starts_and_stops_the_embedded_server(tmp_path):
    data = tmp_path / "data"
    env = {"LOCAL_DATA_DIR": str(data)}
    result = skiplock("migrate", dsn=None, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applied"]
    assert "starting the embedded PostgreSQL" in result.stderr
    assert "stopped the embedded PostgreSQL" in result.stderr
    assert LocalPostgres(data).running_port() is None  # nothing left running


HOSTILE = "k\x1b]0;pwned\x07\x1b[2J\rlevel=ERROR forged\n\u202eexe.txt\x00"  # NUL only where it can be stored


async def test_tenant_strings_reach_the_terminal_escaped(pool, cli):
    """What tenants write (a dedupe key, an error from their handler or page, a run's error)
    is shown by the human commands with every control and bidi character escaped: no ESC
    that retitles the window or clears the screen, no CR or line break that forges a row,
    no U+202E. --json keeps the exact value (JSON escapes it)."""
    text = HOSTILE.replace("\x00", "")
    [job] = await _failed(pool, 1)
    await pool.execute("UPDATE jobs SET dedupe_key = $2, last_error = $2 WHERE id = $1", job, text)
    run_id = await factories.run(pool, "cron")
    await pool.execute("UPDATE runs SET finished_at = now(), stop_reason = 'error', error = $2 WHERE id = $1",
                       run_id, text)
    outputs = [await cli("jobs", "ls", "--status", "failed"), await cli("jobs", "show", str(job)),
               await cli("runs", "ls"), await cli("runs", "show", str(run_id)), await cli("status")]
    for out in outputs:
        assert out.returncode == 0, out.stderr
        assert not {"\x1b", "\x07", "\r", "\u202e"} & set(out.stdout), out.stdout
    shown = outputs[1].stdout
    assert "dedupeKey:  k\\x1b]0;pwned\\x07\\x1b[2J\\rlevel=ERROR forged\\n\\u202eexe.txt" in shown
    assert not [line for line in shown.splitlines() if line.startswith("level=") or line.startswith("\u202e")]
    assert ok_json(await cli("jobs", "show", str(job), "--json"))["dedupeKey"] == text


async def test_status_shows_each_schedule_its_last_period_and_its_next(dsn, pool, cli, monkeypatch):
    monkeypatch.setenv("PIPELINE_STAGES", "tests.sample_stages:WITH_SCHEDULES")
    hourly, weekdays = ok_json(await cli("status", "--json"))["periodic"]
    assert hourly == {"type": "hourly", "everySeconds": 3600.0, "cron": None, "timezone": None, "catchUp": 0,
                      "lastPeriod": None, "lastEnqueuedSecondsAgo": None, "nextPeriod": hourly["nextPeriod"]}
    assert datetime.fromisoformat(hourly["nextPeriod"]).minute == 0
    assert (weekdays["cron"], weekdays["timezone"], weekdays["catchUp"]) == ("0 3 * * MON-FRI", "Europe/Berlin", 2)
    upcoming = datetime.fromisoformat(weekdays["nextPeriod"])  # on Berlin's clock, with its offset that day
    assert (upcoming.hour, upcoming.minute) == (3, 0) and upcoming.weekday() < 5
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in (await cli("status")).stdout.splitlines()
             if line.startswith("periodic ")}
    assert lines["periodic hourly"] == f"every 1h, last enqueued never, next {hourly['nextPeriod']}"
    assert lines["periodic weekdays"] == ("cron 0 3 * * MON-FRI (Europe/Berlin), catching up at most 2 missed, "
                                          f"last enqueued never, next {weekdays['nextPeriod']}")
    await schedule_periodic(pool, WITH_SCHEDULES)
    hourly, weekdays = ok_json(await cli("status", "--json"))["periodic"]
    assert datetime.fromisoformat(hourly["nextPeriod"]) - datetime.fromisoformat(hourly["lastPeriod"]) == timedelta(hours=1)
    assert 0 <= hourly["lastEnqueuedSecondsAgo"] < 60
    assert datetime.fromisoformat(weekdays["lastPeriod"]) < upcoming and weekdays["nextPeriod"] == upcoming.isoformat()


async def test_a_retry_asks_the_stage_again_as_the_api_does(pool, cli, monkeypatch):
    """A failed job queued again is asked of its stage's `accepts`, on its payload as
    stored: the CLI retried what the API refused."""
    monkeypatch.setenv("PIPELINE_STAGES", "tests.sample_stages:WITH_PICKY")
    refused, odd, fine = await enqueue_many(pool, [NewJob(type="picky", payload=p)
                                                   for p in ({"ok": False}, {}, {"ok": True})])
    await pool.execute("UPDATE jobs SET payload = '[1, 2]'::jsonb WHERE id = $1", odd)
    await pool.execute("UPDATE jobs SET status = 'failed', attempts = 3, finished_at = now() WHERE type = 'picky'")
    one_line(await cli("jobs", "retry", str(refused)), 2,
             f"the 'picky' stage refuses job {refused} again: this job is not ok")
    one_line(await cli("jobs", "retry", str(odd)), 2, "payload is not a JSON object")
    assert ok_json(await cli("jobs", "retry", str(fine), "--json"))["status"] == "pending"
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 2
