"""One meaning of "failed" (docs/queue.md#words): a job that ended failed. A failed attempt
that will be tried again is "retried", in the runs row, the run's JSON, the summary's
stages, the totals behind /metrics and the live events; the handlers' counters sit under
summary -> counts. Runs recorded before migration 0036 are split the same way."""

from __future__ import annotations

import json
from importlib.resources import files

import asyncpg

from app import Stage
from app.pipeline.loop import Pipeline
from app.runtime import run_json
from app.settings import load_settings
from tests import factories as f

SPLIT = "0036_failed_means_ended"


async def test_a_run_counts_failed_jobs_and_retried_attempts_apart(pool):
    async def broken(job, ctx):
        ctx.count("tries")
        raise RuntimeError("down")

    stage = Stage(type="t", handler=broken, max_attempts=2)
    await f.jobs(pool, "t", 3)
    pipeline = Pipeline(pool, [stage], load_settings(pipeline_plugins="", run_scheduler=False))
    first = await pipeline.run("manual")
    assert (first.jobs_failed, first.jobs_retried) == (0, 3)
    await pool.execute("UPDATE jobs SET run_after = now()")
    second = await pipeline.run("manual")
    assert (second.jobs_failed, second.jobs_retried) == (3, 0)
    assert second.summary["stages"]["t"] == {"done": 0, "failed": 3, "retried": 0, "deferred": 0}
    assert second.summary["counts"] == {"tries": 3}
    body = run_json(second.row)
    assert (body["jobsFailed"], body["jobsRetried"]) == (3, 0)
    totals = await pool.fetchrow("SELECT failed, retried FROM job_type_totals WHERE type = 't'")
    assert (totals["failed"], totals["retried"]) == (3, 3)
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 3
    finished = await pool.fetchval(
        "SELECT data FROM events WHERE type = 'run.finished' AND data ->> 'run' = $1", str(second.run_id))
    if finished is not None:  # the events feature may be off in this database
        assert finished["jobsRetried"] == 0


async def test_runs_recorded_before_are_split_by_the_migration(new_database):
    url = await new_database()
    db = await asyncpg.connect(url)
    try:
        steps = sorted(p for p in files("app.sql").joinpath("migrations").iterdir()
                       if p.name[:1].isdigit() and p.name.endswith(".sql"))
        for step in steps:
            if step.name.startswith(SPLIT):
                break
            await db.execute(step.read_text(encoding="utf-8"))
        old = {"stages": {"a": {"done": 1, "failed": 2, "deferred": 0},
                          "b": {"done": 0, "failed": 1, "deferred": 0}},
               "gaveUp": 2, "swept": 1, "pages_fetched": 4, "lost": 1}
        await db.execute(
            "INSERT INTO runs (trigger, stop_reason, jobs_done, jobs_failed, summary, finished_at) "
            "VALUES ('cron', 'no_work', 1, 3, $1::jsonb, now())", json.dumps(old))
        await db.execute(files("app.sql").joinpath("migrations", f"{SPLIT}.sql").read_text(encoding="utf-8"))

        run = await db.fetchrow("SELECT jobs_failed, jobs_retried, summary FROM runs")
        # two given up (one by the stuck sweep, counted in no stage), three failed attempts
        # of which one gave up: two retried
        assert (run["jobs_failed"], run["jobs_retried"]) == (2, 2)
        summary = json.loads(run["summary"])
        assert summary == {
            "stages": {"a": {"done": 1, "failed": 1, "retried": 1, "deferred": 0},
                       "b": {"done": 0, "failed": 0, "retried": 1, "deferred": 0}},
            "counts": {"swept": 1, "pages_fetched": 4}, "lost": 1}
        totals = {r["type"]: tuple(r[k] for k in ("done", "failed", "retried"))
                  for r in await db.fetch("SELECT * FROM job_type_totals")}
        assert totals == {"a": (1, 1, 1), "b": (0, 0, 1)}
    finally:
        await db.close()
