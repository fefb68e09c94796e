"""GET /stages lists what the deployment runs; PATCH /stages/{type} lets an operator pause a
stage for every lane and resume it: a running pipeline claims nothing more of it (stale
leases included) while its other stages go on, and every pause is audited."""

from __future__ import annotations

import asyncio

from serving_kit import Recorder

from app import Stage
from app.engine import jobs as q
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_an_operator_pauses_a_stage_and_resumes_it(make_client, pool, admin_headers):
    client = await make_client(stages=[Recorder("a").stage, Recorder("b").stage], api_key=False)
    tenant = await f.api_key(pool, "ann@example.com")

    listed = (await client.get("/stages", headers=_auth(tenant))).json()["data"]
    assert [(s["type"], s["paused"]) for s in listed] == [("a", False), ("b", False)]

    denied = await client.patch("/stages/a", json={"paused": True}, headers=_auth(tenant))
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    missing = await client.patch("/stages/nope", json={"paused": True}, headers=admin_headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for bad in ({}, {"paused": "yes"}, {"paused": True, "why": "x"}):
        answer = await client.patch("/stages/a", json=bad, headers=admin_headers)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_request", bad

    paused = await client.patch("/stages/a", json={"paused": True}, headers=admin_headers)
    assert paused.status_code == 200 and paused.json()["paused"] is True and paused.json()["pausedAt"]
    again = await client.patch("/stages/a", json={"paused": True}, headers=admin_headers)
    assert again.json()["pausedAt"] == paused.json()["pausedAt"]  # pausing twice keeps the time

    metrics = (await client.get("/metrics", headers=admin_headers)).text
    assert 'skiplock_stage_paused{type="a"} 1.0' in metrics and 'stage_paused{type="b"}' not in metrics

    await f.jobs(pool, "a", 3)
    await f.jobs(pool, "b", 2)
    assert await q.claim(pool, f.lease("a"), await f.run(pool), 10) == []
    # a job whose holder died is not taken back either while its stage is paused
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now() - interval '1 day', attempts = 1 "
                       "WHERE id = (SELECT id FROM jobs WHERE type = 'a' LIMIT 1)")
    assert await q.claim(pool, f.lease("a"), await f.run(pool), 10) == []
    assert len(await q.claim(pool, f.lease("b"), await f.run(pool), 10)) == 2  # other stages go on

    resumed = await client.patch("/stages/a", json={"paused": False}, headers=admin_headers)
    assert resumed.json()["paused"] is False and resumed.json()["pausedAt"] is None
    assert len(await q.claim(pool, f.lease("a"), await f.run(pool), 10)) == 3

    audited = await pool.fetch("SELECT actor_kind, op, row_id FROM audit_log WHERE table_name = 'paused_stages' "
                               "ORDER BY id")
    assert [(r["actor_kind"], r["op"], r["row_id"]) for r in audited] == [("admin", "INSERT", "a"),
                                                                          ("admin", "DELETE", "a")]


async def test_a_running_pipeline_stops_claiming_a_stage_paused_meanwhile(pool):
    started: list = []
    release = asyncio.Event()

    async def slow(job, ctx):
        started.append(job.id)
        await release.wait()

    await f.jobs(pool, "slow", 10)
    stage = Stage(type="slow", handler=slow, batch=2, concurrency=2)
    # one claim stream: a second would claim two batches more before the pause
    pipeline = Pipeline(pool, [stage], load_settings(pipeline_plugins="", run_scheduler=False,
                                                     pipeline_claim_streams=1))
    run = asyncio.create_task(pipeline.run("manual", budget=20))
    while len(started) < 2:
        await asyncio.sleep(0.01)
    await pool.execute("INSERT INTO paused_stages (type) VALUES ('slow')")  # plain SQL works too
    release.set()
    result = await asyncio.wait_for(run, 20)
    # the batch claimed before the pause (and the one prefetched beside it) ran; then nothing
    assert result.stop_reason == "no_work" and result.jobs_done == len(started) <= 4
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'slow' AND status = 'pending'") >= 6
