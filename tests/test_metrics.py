"""GET /metrics: who may read it, and every number compared with the database's own
count of the same thing (the runs' running totals with a recount over every run)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.api.main import create_app
from app.engine import queue_stats
from app.engine.db import connect
from app.engine.migrate import chain
from app.engine.queue_stats import DURATION_BOUNDS
from app.engine.runs import beat, close_abandoned_runs, finish_run
from app.plugin import Gauge, Plugin
from app.settings import load_settings
from tests import factories
from tests.credentials import METRICS_TOKEN as TOKEN
from tests.sample_stages import STAGES


async def _demo_gauges(db, settings) -> list[Gauge]:
    runs = await db.fetchval("SELECT count(*) FROM runs")
    return [Gauge("runs_seen", "runs, as a plug-in reads them", runs, (("kind", "all"),))]


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def _seed(pool) -> uuid.UUID:
    """Jobs, finished runs of every kind of ending, and one still running; returns the
    run closed as abandoned."""
    jobs = await factories.jobs(pool, "echo", 4)
    await pool.execute("UPDATE jobs SET run_after = now() - interval '10 minutes' WHERE id = $1", jobs[0])
    await pool.execute("UPDATE jobs SET status = 'running', attempts = 1, locked_at = now() WHERE id = $1", jobs[1])
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1", jobs[2])
    for trigger, reason, seconds, done, failed in [("cron", "no_work", 0.5, 3, 1), ("cron", "no_work", 40, 2, 0),
                                                   ("cron", "error", 200, 0, 2), ("manual", "time_budget", 7, 5, 0)]:
        run_id = await factories.run(pool, trigger)
        await pool.execute(
            "UPDATE runs SET finished_at = started_at + make_interval(secs => $2), stop_reason = $3, "
            "jobs_done = $4::int, jobs_failed = $5::int, summary = jsonb_build_object('stages', jsonb_build_object("
            "'echo', jsonb_build_object('done', $4::int, 'failed', $5::int, 'deferred', 0))) WHERE id = $1",
            run_id, seconds, reason, done, failed)
    # finished the pipeline's way, with two types in its summary
    await finish_run(pool, await factories.run(pool, "cron"), stop_reason="time_budget", done=4, failed=1,
                     deferred=2, units=0, summary=_summary(echo=(3, 1, 0), other=(1, 0, 2)), error=None)
    await pool.execute(INSERT_FINISHED)  # written finished (an import): exactly 5 s, on a bound
    # a run that beat, went silent and was closed as abandoned by a later run
    silent = await factories.run(pool, "http")
    await beat(pool, silent, done=2, failed=0, deferred=1, units=0, summary=_summary(echo=(2, 0, 1)))
    await pool.execute("UPDATE runs SET heartbeat_at = now() - interval '5 minutes' WHERE id = $1", silent)
    assert await close_abandoned_runs(pool) == [silent]
    live = await factories.run(pool, "worker")  # still running: its beats count nowhere
    await beat(pool, live, done=9, failed=9, deferred=9, units=0, summary=_summary(echo=(9, 9, 9)))
    return silent


INSERT_FINISHED = """
INSERT INTO runs (trigger, stop_reason, jobs_done, summary, started_at, finished_at)
VALUES ('cron', 'no_work', 1, '{"stages": {"other": {"done": 1}}}', now() - interval '5 seconds', now())
"""


def _summary(**stages: tuple[int, int, int]) -> dict:
    return {"stages": {t: dict(zip(("done", "failed", "deferred"), n)) for t, n in stages.items()}}


async def _recount(db) -> tuple[dict, dict]:
    """The run totals counted again over every finished run: (trigger, stop_reason) ->
    (runs, seconds, per-bound bucket counts), and type -> {done, failed, deferred}."""
    runs: dict = {}
    endings: dict = {}
    for r in await db.fetch("SELECT trigger, stop_reason, summary, "
                            "extract(epoch FROM finished_at - started_at)::float8 AS took "
                            "FROM runs WHERE finished_at IS NOT NULL"):
        n, seconds, buckets = runs.get((r["trigger"], r["stop_reason"]), (0, 0.0, [0] * len(DURATION_BOUNDS)))
        runs[(r["trigger"], r["stop_reason"])] = (
            n + 1, seconds + r["took"], [b + (r["took"] <= bound) for b, bound in zip(buckets, DURATION_BOUNDS)])
        for type_, counts in r["summary"].get("stages", {}).items():
            e = endings.setdefault(type_, {"done": 0, "failed": 0, "retried": 0, "deferred": 0})
            for outcome in e:
                e[outcome] += counts.get(outcome, 0)
    return runs, endings


async def _totals(db) -> tuple[dict, dict]:
    """What /metrics reads (the running totals), in _recount's shape."""
    runs = {(t.trigger, t.stop_reason): (t.runs, pytest.approx(t.seconds), t.buckets)
            for t in await queue_stats.run_totals(db)}
    endings = {r["type"]: {k: r[k] for k in ("done", "failed", "retried", "deferred")}
               for r in await queue_stats.endings_by_type(db)}
    return runs, endings


async def test_metrics_are_the_databases_own_counts(dsn, pool, admin_key):
    silent = await _seed(pool)
    user_key = await factories.api_key(pool, "ann@example.com")
    settings = load_settings(database_url=dsn, pipeline_plugins="", metrics_token=TOKEN)
    app = create_app(settings, STAGES, plugins=[Plugin(name="demo", metrics=_demo_gauges)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        async def scrape(key: str | None) -> httpx.Response:
            return await client.get("/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})

        assert (await scrape(None)).status_code == 401
        assert (await scrape("not-the-token")).status_code == 401
        refused = await scrape(user_key)  # a tenant's key: the numbers span every tenant
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
        assert (await scrape(admin_key)).status_code == 200
        answer = await scrape(TOKEN)
    await app.state.runtime.close()
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    m = _samples(answer.text)

    def get(name: str, **labels) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    db = {r["status"]: r["n"] for r in await pool.fetch(
        "SELECT status, count(*) AS n FROM jobs WHERE type = 'echo' GROUP BY status")}
    assert get("skiplock_queue_jobs", type="echo", status="pending") == db["pending"] == 2
    assert get("skiplock_queue_jobs", type="echo", status="running") == db["running"] == 1
    oldest = await pool.fetchval("SELECT extract(epoch FROM now() - min(run_after)) FROM jobs "
                                 "WHERE type = 'echo' AND status = 'pending' AND run_after <= now()")
    assert abs(get("skiplock_queue_oldest_ready_seconds", type="echo") - float(oldest)) < 5

    runs, endings = await _recount(pool)
    assert {k for k in m if k[0] == "skiplock_runs_total"} == {
        ("skiplock_runs_total", (("stop_reason", reason), ("trigger", trigger))) for trigger, reason in runs}
    for (trigger, reason), (n, seconds, buckets) in runs.items():
        labels = {"trigger": trigger, "stop_reason": reason}
        assert get("skiplock_runs_total", **labels) == n
        assert get("skiplock_run_duration_seconds_count", **labels) == n
        assert abs(get("skiplock_run_duration_seconds_sum", **labels) - seconds) < 1e-6
        assert [get("skiplock_run_duration_seconds_bucket", **labels, le=f"{b:g}") for b in DURATION_BOUNDS] == buckets
    assert runs[("cron", "no_work")][2][:2] == [1, 2] and runs[("http", "error")][0] == 1  # 0.5 s; 5 s on le=5
    assert get("skiplock_runs_in_progress", trigger="worker") == 1

    assert {k[1] for k in m if k[0] == "skiplock_jobs_total"} == {
        (("outcome", o), ("type", t)) for t in endings
        for o in ("done", "failed", "retried", "deferred", "cancelled")}
    for type_, counts in endings.items():
        for outcome, n in counts.items():
            assert get("skiplock_jobs_total", type=type_, outcome=outcome) == n
        # no job was cancelled here (tests/test_cancels_counted.py cancels some)
        assert get("skiplock_jobs_total", type=type_, outcome="cancelled") == 0
    assert endings["echo"] == {"done": 15, "failed": 4, "retried": 0, "deferred": 1}
    assert endings["other"] == {"done": 2, "failed": 0, "retried": 0, "deferred": 2}

    # the abandoned run finishes after all: its counts move to what its row says now
    await finish_run(pool, silent, stop_reason="time_budget", done=5, failed=1, deferred=0, units=0,
                     summary=_summary(echo=(5, 1, 0)), error=None)
    assert await _totals(pool) == await _recount(pool)
    assert ("http", "error") not in (await _totals(pool))[0]
    assert get("skiplock_demo_runs_seen", kind="all") == 8


async def test_the_totals_count_the_runs_finished_before_them(new_database):
    """Migration 0022 on a database with history: each finished run counted once, the open
    one when it finishes, and the histogram's bounds the same on both sides."""
    db = await connect(await new_database())
    try:
        steps = chain([])
        for version, sql in steps:
            if version >= "0022":
                break
            await db.execute(sql)
        await db.execute(INSERT_FINISHED)
        await db.execute(
            "INSERT INTO runs (trigger, stop_reason, summary, started_at, finished_at) "
            "SELECT 'cron', 'time_budget', jsonb_build_object('stages', jsonb_build_object('echo', "
            "jsonb_build_object('done', g, 'failed', 1))), now() - g * interval '1 minute', "
            "now() - g * interval '1 minute' + g * interval '3 seconds' FROM generate_series(1, 30) AS g")
        await db.execute("INSERT INTO runs (trigger, stop_reason, started_at, finished_at) "
                         "VALUES ('http', 'error', now() - interval '1 hour', now())")  # no summary at all
        open_run = await factories.run(db, "worker")
        for version, sql in steps:
            if version >= "0022":
                await db.execute(sql)
        assert await _totals(db) == await _recount(db)
        # one failed attempt a run, and none gave up (0036 splits what 0022 counted)
        assert (await _totals(db))[1]["echo"] == {"done": 465, "failed": 0, "retried": 30, "deferred": 0}
        await finish_run(db, open_run, stop_reason="no_work", done=1, failed=0, deferred=0, units=0,
                         summary=_summary(echo=(1, 0, 0)), error=None)
        assert await _totals(db) == await _recount(db)
        assert tuple(await db.fetchval("SELECT run_duration_bounds()")) == DURATION_BOUNDS
    finally:
        await db.close()


async def test_readiness_says_when_no_deployment_runs_the_maintenance(dsn, pool):
    app = create_app(load_settings(database_url=dsn, pipeline_plugins="", run_scheduler=False), STAGES)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        never = (await client.get("/health/ready")).json()
        await pool.execute("INSERT INTO recurring_ticks (task, period) VALUES ('sweep_stuck', now())")
        ticked = (await client.get("/health/ready")).json()
    await app.state.runtime.close()
    assert never["status"] == "ready"  # reported, never failed on
    assert never["maintenance"]["state"] == "overdue" and never["maintenance"]["scheduledHere"] is False
    assert "RUN_SCHEDULER is off here" in never["maintenance"]["message"]
    assert ticked["maintenance"]["state"] == "ok" and ticked["maintenance"]["lastTickSecondsAgo"] < 60
