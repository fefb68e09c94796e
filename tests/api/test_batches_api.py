"""The orchestrator and batch progress over HTTP."""

from __future__ import annotations

import asyncio
import uuid

from pydantic import BaseModel, ConfigDict
from serving_kit import Recorder, assert_error

from app.pipeline.stage import Stage
from tests import factories as f


async def client_and_lane(make_client, pool, recorder):
    other = Recorder("export")
    client = await make_client(stages=[recorder.stage, other.stage])
    return client, await f.lane(pool, await f.user(pool))


async def test_create_then_partial_then_all_duplicate(make_client, pool, recorder):
    client, c = await client_and_lane(make_client, pool, recorder)
    first = await client.post(f"/lanes/{c}/batches", json={"jobs": [
        {"type": "record", "payload": {"kind": "videos"}, "total": 40}]})
    assert first.status_code == 201, first.text
    created = first.json()
    assert set(created["created"]) == {"record"} and created["skipped"] == {}

    partial = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record"}, {"type": "export"}]})
    assert partial.status_code == 201
    assert set(partial.json()["created"]) == {"export"}
    assert partial.json()["skipped"] == {"record": created["created"]["record"]}

    dup = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record"}, {"type": "export"}]})
    assert dup.status_code == 409
    error = dup.json()["error"]
    assert error["code"] == "ALL_DUPLICATE_JOBS"
    assert error["details"]["openJobs"] == {"record": created["created"]["record"],
                                            "export": partial.json()["created"]["export"]}


async def test_two_identical_requests_at_once_create_one_set(make_client, pool, recorder):
    client, c = await client_and_lane(make_client, pool, recorder)
    body = {"jobs": [{"type": "record"}, {"type": "export"}]}
    answers = await asyncio.gather(*(client.post(f"/lanes/{c}/batches", json=body) for _ in range(5)))
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409, 409]
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1", c) == 2


async def test_bad_requests_are_clear_4xx(make_client, pool, recorder):
    client, c = await client_and_lane(make_client, pool, recorder)
    unknown = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "nope"}]})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_job_type"
    assert "record" in unknown.json()["error"]["message"]
    empty = await client.post(f"/lanes/{c}/batches", json={"jobs": []})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "invalid_request"
    missing = await client.post(f"/lanes/{uuid.uuid4()}/batches", json={"jobs": [{"type": "record"}]})
    assert missing.status_code == 404
    param = await client.post(f"/lanes/{c}/batches?force=1", json={"jobs": [{"type": "record"}]})
    assert param.status_code == 400 and "'force'" in param.json()["error"]["message"]
    twice = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record"}, {"type": "record", "total": 2}]})
    assert twice.status_code == 422 and twice.json()["error"]["code"] == "duplicate_job_type", twice.text
    assert twice.json()["error"]["details"] == {"duplicates": ["record"]}
    for total in (True, "3", 2.5):
        odd = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record", "total": total}]})
        assert odd.status_code == 422 and odd.json()["error"]["code"] == "invalid_request", (total, odd.text)
    garbage = await client.post(f"/lanes/{c}/batches", content=b"{not json",
                                headers={"content-type": "application/json"})
    assert garbage.status_code == 422
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_progress_through_a_real_run(make_client, pool, recorder):
    client, c = await client_and_lane(make_client, pool, recorder)
    created = (await client.post(f"/lanes/{c}/batches", json={"jobs": [
        {"type": "record", "total": 10}, {"type": "export", "total": 5}]})).json()
    batch = (await client.get(f"/batches/{created['batchId']}")).json()
    assert batch["status"] == "pending" and batch["counts"] == {"pending": 2, "running": 0, "done": 0, "failed": 0,
                                                                    "cancelled": 0}
    assert (batch["total"], batch["progress"]) == (15, 0)
    from serving_kit import AUTH
    assert (await client.post("/cron/pipeline", headers=AUTH)).status_code == 200
    assert (await client.post("/cron/pipeline", headers=AUTH)).status_code == 200  # reconciles
    batch = (await client.get(f"/batches/{created['batchId']}")).json()
    assert batch["status"] == "completed" and batch["counts"]["done"] == 2
    assert batch["progress"] == 15 and batch["finishedAt"] is not None
    assert (await client.post(f"/batches/{created['batchId']}/cancel")).status_code == 409
    assert (await client.get(f"/batches/{uuid.uuid4()}")).status_code == 404


class DraftPayload(BaseModel):
    """A payload a stage of this test declares."""
    model_config = ConfigDict(extra="forbid")
    contact_id: uuid.UUID


async def test_each_payload_in_a_batch_is_checked_against_its_stage(make_client, pool):
    async def noop(job, ctx) -> None:
        return None

    client = await make_client(stages=[Recorder("record").stage,
                                       Stage(type="draft", handler=noop, payload=DraftPayload, lease=60, timeout=10)])
    c = await f.lane(pool, await f.user(pool))
    r = await client.post(f"/lanes/{c}/batches", json={"jobs": [
        {"type": "record", "payload": {"free": "form"}}, {"type": "draft", "payload": {"contact": 1}}]})
    error = assert_error(r, 422, "invalid_request")
    assert [d["location"] for d in error["details"]] == ["body.jobs.1.payload.contact_id", "body.jobs.1.payload.contact"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    contact = str(uuid.uuid4())
    ok = await client.post(f"/lanes/{c}/batches", json={"jobs": [
        {"type": "record", "payload": {"free": "form"}}, {"type": "draft", "payload": {"contact_id": contact}}]})
    assert ok.status_code == 201, ok.text
    assert await pool.fetchval("SELECT payload FROM jobs WHERE type = 'draft'") == {"contact_id": contact}
