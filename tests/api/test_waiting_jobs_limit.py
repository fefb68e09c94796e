"""A tenant's key enqueues while fewer than TENANT_WAITING_JOBS_MAX jobs wait in its lanes.
A resource-exhaustion pass enqueued 2,390 jobs a minute from one tenant with nothing
refused (about 650 MB an hour), and jobs due in the year 9999 wait for ever."""

from __future__ import annotations

from serving_kit import make_settings

from app.pipeline.stage import Stage
from tests import factories as f

MOST = 5


async def _nothing(job, ctx):
    pass


async def _tenant(pool, email: str):
    """Its headers and two lanes of its own."""
    t = await f.tenant(pool, email)
    return t.headers, str(t.lane), str(await f.lane(pool, t.user_id))


async def test_a_tenant_past_its_waiting_jobs_is_refused_until_some_run(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, tenant_waiting_jobs_max=MOST, pipeline_plugins=""),
                               [Stage(type="record", handler=_nothing)], api_key=False)
    ann, ann_one, ann_two = await _tenant(pool, "ann@waiting.example")
    bob, bob_lane, _ = await _tenant(pool, "bob@waiting.example")

    def job(lane: str, i: int, **more) -> dict:
        return {"type": "record", "lane": lane, "payload": {"i": i}, **more}
    # her lanes together: the cap is the account's, not a lane's (a job due in 9999 waits too)
    sent = [await client.post("/jobs", headers=ann, json=job((ann_one, ann_two)[i % 2], i,
                                                             run_after="9999-01-01T00:00:00Z"))
            for i in range(MOST)]
    assert [r.status_code for r in sent] == [201] * MOST
    refused = await client.post("/jobs", headers=ann, json=job(ann_one, 99))
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "waiting_jobs_limit" and error["details"] == {"waiting": MOST, "limit": MOST}
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE payload->>'i' = '99'") == 0

    # another tenant is not counted with her, nor is the operator
    assert (await client.post("/jobs", headers=bob, json=job(bob_lane, 1))).status_code == 201
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'ops@waiting.example', admin=True)}"}
    assert (await client.post("/jobs", headers=admin, json={"type": "record", "payload": {}})).status_code == 201

    # one of hers leaves the queue (cancelled): room for one more
    first = sent[0].json()["job"]["id"]
    assert (await client.post(f"/jobs/{first}/cancel", headers=ann)).status_code == 200
    assert (await client.post("/jobs", headers=ann, json=job(ann_one, 101))).status_code == 201
    assert (await client.post("/jobs", headers=ann, json=job(ann_one, 102))).status_code == 429


async def test_retrying_cancelled_jobs_does_not_pass_the_cap(make_client, pool, dsn):
    """An attack pass filled the cap, cancelled every job, filled it again and retried the
    cancelled ones: three times the cap waited. A retry makes a job wait: it is weighed too."""
    client = await make_client(make_settings(dsn, tenant_waiting_jobs_max=MOST, pipeline_plugins=""),
                               [Stage(type="record", handler=_nothing)], api_key=False)
    ann, lane, _ = await _tenant(pool, "ann@retry-cap.example")
    cancelled = []
    for _ in range(2):
        sent = [await client.post("/jobs", headers=ann, json={"type": "record", "lane": lane, "payload": {}})
                for _ in range(MOST)]
        for job in sent:
            assert (await client.post(f"/jobs/{job.json()['job']['id']}/cancel", headers=ann)).status_code == 200
            cancelled.append(job.json()["job"]["id"])
    waiting = [(await client.post("/jobs", headers=ann, json={"type": "record", "lane": lane})).json()["job"]["id"]
               for _ in range(MOST)]
    retried = await client.post(f"/jobs/{cancelled[0]}/retry", headers=ann)
    assert retried.status_code == 429 and retried.json()["error"]["code"] == "waiting_jobs_limit", retried.text
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending'") == MOST
    # one leaves the queue: room for one retry, not two
    assert (await client.post(f"/jobs/{waiting[0]}/cancel", headers=ann)).status_code == 200
    assert (await client.post(f"/jobs/{cancelled[0]}/retry", headers=ann)).status_code == 200
    assert (await client.post(f"/jobs/{cancelled[1]}/retry", headers=ann)).status_code == 429
