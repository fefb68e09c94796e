"""/cron/pipeline through httpx.ASGITransport and through a real uvicorn."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from serving_kit import (AUTH, SECRET, Recorder, assert_error, free_socket, make_settings, seed,
                         start_uvicorn)

from app.api import create_app

RUN_KEYS = {"id", "trigger", "stopReason", "jobsDone", "jobsFailed", "jobsRetried", "jobsDeferred", "quotaUnits",
            "summary", "error", "startedAt", "finishedAt", "durationSeconds", "budgetSeconds"}


@pytest.fixture
def make_client(make_client):
    """The cron route has its own secret: these clients send no API key unless asked."""
    async def make(*args, **kw):
        kw.setdefault("api_key", False)
        return await make_client(*args, **kw)
    return make


@pytest.mark.parametrize("headers, why", [
    ({}, "missing header"),
    ({"Authorization": "Bearer not-the-secret"}, "wrong cron secret"),
    ({"Authorization": f"Basic {SECRET}"}, "must be: Bearer"),
    ({"Authorization": "Bearer"}, "must be: Bearer"),
    ({"Authorization": f"Bearer {SECRET}x"}, "wrong cron secret"),
])
async def test_wrong_or_missing_secret_is_401(make_client, via, pool, recorder, headers, why):
    await seed(pool, 2)
    client = await make_client(stages=[recorder.stage], via=via)
    for method in ("GET", "POST"):
        r = await client.request(method, "/cron/pipeline", headers=headers)
        error = assert_error(r, 401, "unauthorized")
        assert why in error["message"]
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert recorder.seen == []
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0


async def test_no_secret_configured_is_503(make_client, via, dsn, recorder):
    client = await make_client(make_settings(dsn, cron_secret=None), [recorder.stage], via=via)
    r = await client.post("/cron/pipeline", headers=AUTH)
    error = assert_error(r, 503, "cron_secret_not_configured")
    assert "CRON_SECRET" in error["message"]


async def test_local_dev_mode_without_secret_runs(make_client, dsn, pool, recorder):
    await seed(pool, 3)
    client = await make_client(make_settings(dsn, cron_secret=None, local_dev=True), [recorder.stage])
    r = await client.post("/cron/pipeline")
    assert r.status_code == 200, r.text
    assert r.json()["summary"]["stages"]["record"]["done"] == 3


async def test_local_dev_mode_with_a_secret_still_checks_it(make_client, dsn, recorder):
    client = await make_client(make_settings(dsn, local_dev=True), [recorder.stage])
    assert_error(await client.post("/cron/pipeline"), 401, "unauthorized")


async def test_a_run_returns_its_summary_and_writes_its_runs_row(make_client, via, pool, recorder):
    ids = await seed(pool, 7)
    client = await make_client(stages=[recorder.stage], via=via)
    r = await client.post("/cron/pipeline", headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == RUN_KEYS
    assert body["trigger"] == "http"
    assert body["stopReason"] == "no_work"
    assert body["jobsFailed"] == 0 and body["error"] is None
    assert body["summary"]["stages"]["record"] == {"done": 7, "failed": 0, "retried": 0, "deferred": 0}
    assert sorted(recorder.seen) == sorted(ids)

    row = await pool.fetchrow("SELECT * FROM runs WHERE id = $1::uuid", body["id"])
    assert row["trigger"] == "http"
    assert row["stop_reason"] == "no_work"
    assert row["finished_at"] is not None
    assert (row["jobs_done"], row["jobs_failed"], row["jobs_deferred"]) == \
        (body["jobsDone"], body["jobsFailed"], body["jobsDeferred"])
    jobs = await pool.fetch("SELECT status, run_id FROM jobs WHERE id = ANY($1::uuid[])", ids)
    assert {(j["status"], str(j["run_id"])) for j in jobs} == {("done", body["id"])}


async def test_a_run_has_one_shape_on_the_trigger_and_in_the_runs_log(make_client, pool, recorder):
    await seed(pool, 3)
    client = await make_client(stages=[recorder.stage], api_key=True)
    body = (await client.post("/cron/pipeline", headers=AUTH)).json()
    one = (await client.get(f"/runs/{body['id']}")).json()
    [listed] = (await client.get("/runs")).json()["data"]
    assert set(body) - set(one) == {"budgetSeconds"}  # the trigger also says the budget it gave
    assert {k: v for k, v in body.items() if k != "budgetSeconds"} == one == listed
    assert one["jobsDone"] == 3 and one["quotaUnits"] == 0


async def test_get_works_like_post(make_client, pool, recorder):
    await seed(pool, 2)
    client = await make_client(stages=[recorder.stage])
    r = await client.get("/cron/pipeline", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["summary"]["stages"]["record"]["done"] == 2


async def test_two_triggers_at_once_share_no_job(make_client, via, pool):
    slow = Recorder(delay=0.02, batch=4, concurrency=2)
    ids = await seed(pool, 40)
    client = await make_client(stages=[slow.stage], via=via)
    a, b = await asyncio.gather(client.post("/cron/pipeline", headers=AUTH),
                                client.post("/cron/pipeline", headers=AUTH))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    runs = [a.json(), b.json()]
    assert runs[0]["id"] != runs[1]["id"]

    assert len(slow.seen) == len(set(slow.seen)) == 40  # every job ran, none twice
    assert set(slow.seen) == set(ids)
    done = [r["summary"]["stages"].get("record", {}).get("done", 0) for r in runs]
    assert sum(done) == 40 and min(done) > 0, done  # both did work, and none of it twice

    rows = await pool.fetch("SELECT id::text, stop_reason, jobs_done, finished_at FROM runs")
    assert {r["id"] for r in rows} == {runs[0]["id"], runs[1]["id"]}
    assert all(r["finished_at"] is not None and r["stop_reason"] == "no_work" for r in rows)
    owners = await pool.fetch("SELECT run_id::text, count(*) AS n FROM jobs GROUP BY run_id")
    assert {o["run_id"]: o["n"] for o in owners} == {r["id"]: d for r, d in zip(runs, done)}


async def test_budget_is_capped_by_the_setting(make_client, dsn, pool, recorder):
    client = await make_client(make_settings(dsn, pipeline_budget_seconds=5), [recorder.stage])
    r = await client.post("/cron/pipeline?budget=1000", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["budgetSeconds"] == 5
    r = await client.post("/cron/pipeline?budget=2.5", headers=AUTH)
    assert r.json()["budgetSeconds"] == 2.5
    r = await client.post("/cron/pipeline", headers=AUTH)
    assert r.json()["budgetSeconds"] == 5


async def test_a_small_budget_stops_claiming(make_client, pool):
    slow = Recorder(delay=0.15, batch=1, concurrency=1)
    ids = await seed(pool, 30)
    client = await make_client(stages=[slow.stage])
    r = await client.post("/cron/pipeline?budget=0.3", headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stopReason"] == "time_budget"
    assert 1 <= len(slow.seen) < 10
    pending = await pool.fetchval(
        "SELECT count(*) FROM jobs WHERE status = 'pending' AND id = ANY($1::uuid[])", ids)
    assert pending == 30 - len(slow.seen)


@pytest.mark.parametrize("value", ["abc", "-1", "0", "-0.0", "nan", "inf", "1e400", "", "%20", "1s"])
async def test_bad_budget_is_422_with_a_clear_message(make_client, pool, recorder, value):
    client = await make_client(stages=[recorder.stage])
    r = await client.post(f"/cron/pipeline?budget={value}", headers=AUTH)
    error = assert_error(r, 422, "invalid_budget")
    assert "budget must be a positive number of seconds" in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0


async def test_budget_given_twice_or_unknown_params_are_400(make_client, pool, recorder):
    client = await make_client(stages=[recorder.stage])
    assert_error(await client.post("/cron/pipeline?budget=1&budget=2", headers=AUTH), 400, "bad_request")
    error = assert_error(await client.post("/cron/pipeline?budgte=5", headers=AUTH), 400, "unknown_parameter")
    assert "'budgte'" in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0


async def test_auth_is_checked_before_the_input(make_client, recorder):
    client = await make_client(stages=[recorder.stage])
    assert_error(await client.post("/cron/pipeline?budget=abc"), 401, "unauthorized")


async def test_unreachable_database_is_503(make_client, via, recorder):
    with free_socket() as sock:  # bound, never listening: connections are refused
        port = sock.getsockname()[1]
        # a run waits for a database that is away, within its hard limit (here 2 s: the
        # platform limit less the finish margin), then answers 503
        settings = make_settings(f"postgresql://postgres@127.0.0.1:{port}/none", pipeline_budget_seconds=1,
                                 platform_limit_seconds=12, finish_margin_seconds=10)
        client = await make_client(settings, [recorder.stage], via=via)
        error = assert_error(await client.post("/cron/pipeline", headers=AUTH), 503, "database_unavailable")
    assert "Traceback" not in error["message"]


async def test_no_database_configured_is_503(make_client, recorder):
    client = await make_client(make_settings(None), [recorder.stage])
    error = assert_error(await client.post("/cron/pipeline", headers=AUTH), 503, "database_not_configured")
    assert "DATABASE_URL" in error["message"]


async def test_other_routes_and_methods_answer_json(make_client, via, recorder):
    client = await make_client(stages=[recorder.stage], via=via)
    assert_error(await client.put("/cron/pipeline", headers=AUTH), 405, "method_not_allowed")
    assert_error(await client.get("/nowhere"), 404, "not_found")


async def test_an_unexpected_exception_is_a_json_500_without_traceback(via, dsn, recorder):
    app = create_app(make_settings(dsn), [recorder.stage])

    async def boom():
        raise RuntimeError("secret internals")
    app.add_api_route("/boom", boom)
    if via == "asgi":
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            r = await client.get("/boom")
    else:
        server, task, sock = await start_uvicorn(app)
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{sock.getsockname()[1]}/boom")
        server.should_exit = True
        await task
        sock.close()
    error = assert_error(r, 500, "internal_error")
    assert "secret internals" not in r.text and "Traceback" not in r.text
    assert error["message"]
