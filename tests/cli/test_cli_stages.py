"""`skiplock stages`: the stages this deployment runs, and an operator pausing one for every
lane and resuming it, against the real database, audited as system/cli; `status` says which
stages are paused, and counts done, failed and retried as the words mean (docs/queue.md#words)."""

from __future__ import annotations

from app.engine.jobs import NewJob, enqueue_many
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests.cli.test_cli_operator import ok_json, one_line
from tests.sample_stages import STAGES


async def test_an_operator_pauses_a_stage_from_the_cli(dsn, pool, cli):
    listed = ok_json(await cli("stages", "ls", "--json"))["data"]
    assert [(s["type"], s["paused"]) for s in listed] == [("echo", False)]
    text = await cli("stages", "ls")
    assert text.stdout.splitlines()[0].split() == ["STAGE", "BATCH", "CONCURRENCY", "MAX", "ATTEMPTS", "STATE"]

    paused = ok_json(await cli("stages", "pause", "echo", "--json"))
    assert paused["paused"] is True and paused["pausedAt"]
    await enqueue_many(pool, [NewJob(type="echo") for _ in range(3)])
    settings = load_settings(database_url=dsn, pipeline_plugins="")
    assert (await Pipeline(pool, STAGES, settings).run("cron")).jobs_done == 0
    status = await cli("status")
    assert "paused stages" in status.stdout and "echo" in status.stdout.split("paused stages")[1]

    resumed = await cli("stages", "resume", "echo")
    assert resumed.returncode == 0 and resumed.stdout.strip() == "stage echo: running"
    assert (await Pipeline(pool, STAGES, settings).run("cron")).jobs_done == 3
    audited = await pool.fetch("SELECT actor_kind, actor_id, op FROM audit_log WHERE table_name = 'paused_stages' "
                               "ORDER BY id")
    assert [(r["actor_kind"], r["actor_id"], r["op"]) for r in audited] == [
        ("system", "cli", "INSERT"), ("system", "cli", "DELETE")]


async def test_a_stage_that_does_not_run_here_is_one_line(cli):
    one_line(await cli("stages", "pause", "nope"), 2, "no stage 'nope' runs here")


async def test_status_counts_failed_jobs_and_retried_attempts_apart(pool, cli):
    await enqueue_many(pool, [NewJob(type="echo") for _ in range(4)])
    await pool.execute("UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'x' "
                       "WHERE id IN (SELECT id FROM jobs LIMIT 2)")
    await pool.execute("INSERT INTO runs (trigger, stop_reason, finished_at, jobs_retried, summary) VALUES "
                       "('cron', 'no_work', now(), 3, "
                       "'{\"stages\": {\"echo\": {\"done\": 0, \"failed\": 0, \"retried\": 3, \"deferred\": 0}}}')")
    [row] = ok_json(await cli("status", "--json"))["stages"]
    assert (row["failedLastDay"], row["retriedLastDay"], row["pending"]) == (2, 3, 2)
    assert ok_json(await cli("runs", "ls", "--json"))["data"][0]["jobsRetried"] == 3
