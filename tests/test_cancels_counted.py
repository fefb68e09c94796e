"""/metrics counts cancels: skiplock_jobs_total{outcome="cancelled"}, from job_type_totals'
`cancelled`, which a trigger on jobs keeps as each job ends cancelled (migration 0049):
a pending job's cancel over the API, a running job's (its run ends it), the waiting jobs
cancelled down a chain, a job enqueued after a cancelled one. Real runs, the real API."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from app.engine.db import connect
from app.engine.migrate import chain
from tests import factories as f
from tests.test_cancel_running import NOTICED_WITHIN, Sleepy, start_run, status_within
from tests.test_outcomes import client_for  # noqa: F401  (a fixture: the app on these stages, with an admin key)

PROMTOOL = shutil.which("promtool")


def _jobs_total(text: str) -> dict[tuple[str, str], float]:
    return {(s.labels["type"], s.labels["outcome"]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "skiplock_jobs_total"}


async def test_metrics_count_each_job_that_ends_cancelled(pool, client_for):
    sleepy = Sleepy()
    client = await client_for([sleepy.stage])
    before = _jobs_total((await client.get("/metrics")).text)
    assert before.get(("t", "cancelled"), 0) == 0

    # a running job, stopped by the run that holds it
    [running] = await f.jobs(pool, "t", 1)
    run = start_run(pool, sleepy.stage)
    await asyncio.wait_for(sleepy.event(running).wait(), 10)
    assert (await client.post(f"/jobs/{running}/cancel")).status_code == 202
    await status_within(pool, running, "cancelled", NOTICED_WITHIN)
    result = await asyncio.wait_for(run, 10)
    assert result.summary["stages"]["t"]["cancelled"] == 1

    # a pending job, cancelled by a person, and the job waiting for it down the chain
    [pending] = await f.jobs(pool, "t", 1)
    waiting = await pool.fetchval("INSERT INTO jobs (type, lane, parents) VALUES ('t', $1, ARRAY[$2::uuid]) "
                                  "RETURNING id", (await f.job_row(pool, pending))["lane"], pending)
    assert (await f.job_row(pool, waiting))["status"] == "waiting"
    answer = await client.post(f"/jobs/{pending}/cancel")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled", answer.text
    assert (await f.job_row(pool, waiting))["status"] == "cancelled"
    # a job enqueued after one already cancelled is written cancelled
    late = await pool.fetchval("INSERT INTO jobs (type, lane, parents) VALUES ('t', $1, ARRAY[$2::uuid]) "
                               "RETURNING id", (await f.job_row(pool, pending))["lane"], pending)
    assert (await f.job_row(pool, late))["status"] == "cancelled"
    # a job of another type, which no run ever touched: counted under its own type
    [other] = await f.jobs(pool, "other", 1)
    assert (await client.post(f"/jobs/{other}/cancel")).status_code == 200
    # cancelling one already cancelled changes nothing and counts nothing
    assert (await client.post(f"/jobs/{pending}/cancel")).status_code == 409

    scrape = await client.get("/metrics")
    assert scrape.status_code == 200
    after = _jobs_total(scrape.text)
    assert after[("t", "cancelled")] == 4
    assert after[("other", "cancelled")] == 1
    # the runs' counts are as they were: a cancel is none of them
    for outcome in ("done", "failed", "retried", "deferred"):
        assert after[("t", outcome)] == before.get(("t", outcome), 0)
        assert after[("other", outcome)] == 0
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 5

    # a retried cancel that is cancelled again counts again: it ended cancelled twice
    assert (await client.post(f"/jobs/{other}/retry")).status_code == 200
    assert (await client.post(f"/jobs/{other}/cancel")).status_code == 200
    assert _jobs_total((await client.get("/metrics")).text)[("other", "cancelled")] == 2

    if PROMTOOL:  # the text format as Prometheus itself reads it
        checked = subprocess.run([PROMTOOL, "check", "metrics"], input=scrape.text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_the_migration_counts_the_cancels_already_made(new_database):
    """Migration 0049 on a database with history: the cancelled jobs still in jobs are
    counted once, beside what the runs counted, and later cancels add to them."""
    db = await connect(await new_database())
    try:
        steps = chain([])
        for version, sql in steps:
            if version >= "0049":
                break
            await db.execute(sql)
        # plain SQL: the enqueue statements of today name columns later migrations add
        ids = [r["id"] for r in await db.fetch("INSERT INTO jobs (type) SELECT 't' FROM generate_series(1, 4) "
                                               "RETURNING id")]
        await db.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = ANY ($1::uuid[])",
                         ids[:3])
        await db.execute("INSERT INTO runs (trigger, stop_reason, summary, started_at, finished_at) "
                         "VALUES ('cron', 'no_work', '{\"stages\": {\"t\": {\"done\": 7}}}', now(), now())")
        for version, sql in steps:
            if version >= "0049":
                await db.execute(sql)
        totals = await db.fetchrow("SELECT done, cancelled FROM job_type_totals WHERE type = 't'")
        assert (totals["done"], totals["cancelled"]) == (7, 3)
        await db.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = $1", ids[3])
        assert await db.fetchval("SELECT cancelled FROM job_type_totals WHERE type = 't'") == 4
        await db.execute("UPDATE jobs SET progress = 1 WHERE id = $1", ids[0])  # still cancelled: not again
        assert await db.fetchval("SELECT cancelled FROM job_type_totals WHERE type = 't'") == 4
    finally:
        await db.close()
