"""POST /jobs with after (jobs it waits for) and run_anyway, GET /jobs/{id} showing them and
the handler's result, a batch with a callback; refusals (unknown, another tenant's, itself
through plain SQL is the engine's test) as 422s in the one error shape."""

from __future__ import annotations

import uuid

from serving_kit import Recorder, assert_error

from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from app.settings import load_settings
from tests import factories as f


async def answer(job, ctx):
    return {"parents": {str(k): v for k, v in (await ctx.parent_results()).items()}, "me": job.payload}


ANSWER = Stage(type="answer", handler=answer, lease=60, timeout=10)


async def test_a_job_waits_for_its_parents_and_shows_their_results(make_client, pool):
    client = await make_client(stages=[ANSWER])
    a = (await client.post("/jobs", json={"type": "answer", "payload": {"n": 1}})).json()["job"]
    posted = await client.post("/jobs", json={"type": "answer", "payload": {"n": 2}, "after": [a["id"]]})
    assert posted.status_code == 201, posted.text
    b = posted.json()["job"]
    assert b["status"] == "waiting"
    shown = (await client.get(f"/jobs/{b['id']}")).json()
    assert shown["after"] == [a["id"]] and shown["runAnyway"] is False and shown["result"] is None
    assert (await client.get("/jobs", params={"status": "waiting"})).json()["data"][0]["id"] == b["id"]

    for _ in range(2):
        await Pipeline(pool, [ANSWER], load_settings(database_url="postgresql://unused", run_scheduler=False)).run("manual")
    a_done = (await client.get(f"/jobs/{a['id']}")).json()
    b_done = (await client.get(f"/jobs/{b['id']}")).json()
    assert a_done["result"] == {"parents": {}, "me": {"n": 1}}
    assert b_done["status"] == "done" and b_done["result"] == {"parents": {a["id"]: a_done["result"]}, "me": {"n": 2}}


async def test_unknown_and_foreign_parents_are_422(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    ann, bob = await f.tenant(pool, "ann@example.com"), await f.tenant(pool, "bob@example.com")
    anns = (await client.post("/jobs", json={"type": "record", "lane": str(ann.lane)}, headers=ann.headers)).json()["job"]
    bobs = (await client.post("/jobs", json={"type": "record", "lane": str(bob.lane)}, headers=bob.headers)).json()["job"]

    made_up = str(uuid.uuid4())
    for after, unknown in (([made_up], made_up), ([bobs["id"], anns["id"]], anns["id"])):
        # Bob naming Ann's job: as unknown as a made-up id
        refused = await client.post("/jobs", json={"type": "record", "lane": str(bob.lane), "after": after},
                                    headers=bob.headers)
        assert_error(refused, 422, "unknown_parent")
        assert refused.json()["error"]["details"] == {"unknown": [unknown]}
    assert await pool.fetchval("SELECT has_dependents FROM jobs WHERE id = $1", uuid.UUID(anns["id"])) is None
    ok = await client.post("/jobs", json={"type": "record", "lane": str(bob.lane), "after": [bobs["id"]]},
                           headers=bob.headers)
    assert ok.status_code == 201 and ok.json()["job"]["status"] == "waiting"

    assert_error(await client.post("/jobs", json={"type": "record", "run_anyway": True}), 422, "invalid_value")
    assert_error(await client.post("/jobs", json={"type": "record", "after": [bobs["id"]], "run_anyway": 0}), 422,
                 "invalid_request")
    assert_error(await client.post("/jobs", json={"type": "record", "after": ["nope"]}), 422, "invalid_request")
    assert_error(await client.post("/jobs", json={"type": "record", "after": [made_up] * 101}), 422,
                 "invalid_request")


async def test_a_batch_callback_through_the_api(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("report").stage])
    lane = await f.lane(pool)
    bad = await client.post(f"/lanes/{lane}/batches",
                            json={"jobs": [{"type": "record"}], "callback": {"type": "nope"}})
    assert_error(bad, 422, "unknown_job_type")
    made = await client.post(f"/lanes/{lane}/batches", json={"jobs": [{"type": "record"}],
                                                            "callback": {"type": "report", "payload": {"to": "ops"}}})
    assert made.status_code == 201, made.text
    batch = made.json()["batchId"]
    cancelled = await client.post(f"/batches/{batch}/cancel")
    assert cancelled.status_code == 200
    [row] = await pool.fetch("SELECT payload, lane FROM jobs WHERE type = 'report'")
    assert row["payload"] == {"to": "ops", "batch": {"id": batch, "status": "cancelled"}} and row["lane"] == lane


async def test_a_tenants_waiting_jobs_count_against_its_cap(make_client, pool, dsn):
    from serving_kit import make_settings
    client = await make_client(make_settings(dsn, tenant_waiting_jobs_max=3, pipeline_plugins=""),
                               [Recorder("record").stage], api_key=False)
    ann = await f.tenant(pool, "ann@example.com")
    parent = (await client.post("/jobs", json={"type": "record", "lane": str(ann.lane)}, headers=ann.headers)).json()["job"]
    await pool.execute("UPDATE jobs SET status = 'running' WHERE id = $1", uuid.UUID(parent["id"]))  # never ends
    sent = [await client.post("/jobs", json={"type": "record", "lane": str(ann.lane), "after": [parent["id"]]},
                              headers=ann.headers) for _ in range(4)]
    assert [r.status_code for r in sent] == [201, 201, 201, 429]


async def test_cancelling_a_waiting_job_cancels_what_waits_for_it(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    a = (await client.post("/jobs", json={"type": "record"})).json()["job"]
    b = (await client.post("/jobs", json={"type": "record", "after": [a["id"]]})).json()["job"]
    c = (await client.post("/jobs", json={"type": "record", "after": [b["id"]]})).json()["job"]
    cancelled = await client.post(f"/jobs/{b['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert [(await client.get(f"/jobs/{j['id']}")).json()["status"] for j in (a, b, c)] == ["pending", "cancelled",
                                                                                            "cancelled"]
