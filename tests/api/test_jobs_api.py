"""Jobs over HTTP: enqueue (201 / 200 on a dedupe match), look up, and the state rules
of retry and cancel, against the real queue."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from serving_kit import Recorder, assert_error

from app.engine import accounts
from app.engine import jobs as q
from app.pipeline.stage import JobRefused, Stage
from tests import factories as f


async def client_with_stages(make_client):
    return await make_client(stages=[Recorder("record").stage, Recorder("export").stage])


async def test_enqueue_answers_201_then_200_with_the_open_job(make_client, pool):
    client = await client_with_stages(make_client)
    c = await f.lane(pool, await f.user(pool))
    body = {"type": "record", "payload": {"url": "https://example.com"}, "dedupe_key": "site:1",
            "lane": str(c), "run_after": "2030-01-02T03:04:05Z"}
    first = await client.post("/jobs", json=body)
    assert first.status_code == 201, first.text
    created = first.json()
    assert created["created"] is True
    job = created["job"]
    assert first.headers["location"] == f"/jobs/{job['id']}"
    assert (job["type"], job["status"], job["attempts"], job["dedupeKey"]) == ("record", "pending", 0, "site:1")
    assert job["payload"] == {"url": "https://example.com"} and job["lane"] == str(c)
    assert datetime.fromisoformat(job["runAfter"]) == datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)

    again = await client.post("/jobs", json={**body, "payload": {"other": True}})
    assert again.status_code == 200, again.text
    assert again.json()["created"] is False
    assert again.json()["job"]["id"] == job["id"]
    assert again.json()["job"]["payload"] == {"url": "https://example.com"}  # the open one, unchanged
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1

    fetched = await client.get(f"/jobs/{job['id']}")
    assert fetched.status_code == 200 and fetched.json() == job


async def test_many_enqueues_of_one_dedupe_key_at_once_make_one_job(make_client, pool):
    client = await client_with_stages(make_client)
    answers = await asyncio.gather(*(client.post("/jobs", json={"type": "record", "dedupe_key": "k"})
                                     for _ in range(8)))
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201]
    assert len({a.json()["job"]["id"] for a in answers}) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_finished_dedupe_key_can_be_enqueued_again(make_client, pool):
    client = await client_with_stages(make_client)
    first = (await client.post("/jobs", json={"type": "record", "dedupe_key": "k"})).json()["job"]
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1",
                       uuid.UUID(first["id"]))
    second = await client.post("/jobs", json={"type": "record", "dedupe_key": "k"})
    assert second.status_code == 201 and second.json()["job"]["id"] != first["id"]


async def test_bad_enqueues_are_422_naming_what_is_wrong(make_client, pool):
    client = await client_with_stages(make_client)
    unknown = assert_error(await client.post("/jobs", json={"type": "nope"}), 422, "unknown_job_type")
    assert "record" in unknown["message"] and "export" in unknown["message"]
    assert unknown["details"]["known"] == ["record", "export"]
    internal = assert_error(await client.post("/jobs", json={"type": "maintenance"}), 422, "unknown_job_type")
    assert "maintenance" not in internal["details"]["known"]
    # an admin may name a lane nobody has made: it is made, ownerless (a tenant gets
    # unknown_lane: tests/api/test_tenants.py)
    lane = str(uuid.uuid4())
    made = await client.post("/jobs", json={"type": "record", "lane": lane})
    assert made.status_code == 201 and made.json()["job"]["lane"] == lane
    assert await pool.fetchval("SELECT owner_id FROM lanes WHERE id = $1", uuid.UUID(lane)) is None
    extra = assert_error(await client.post("/jobs", json={"type": "record", "weight": 1}), 422, "invalid_request")
    assert "weight" in extra["message"]
    payload = assert_error(await client.post("/jobs", json={"type": "record", "payload": [1]}), 422, "invalid_request")
    assert "payload" in payload["message"]
    nul = await client.post("/jobs", json={"type": "record", "payload": {"a": "x\u0000y"}})
    assert nul.status_code == 422, nul.text
    when = assert_error(await client.post("/jobs", json={"type": "record", "run_after": "tomorrow"}),
                        422, "invalid_request")
    assert "run_after" in when["message"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1  # the admin's job in a new lane


async def test_run_after_at_the_ends_of_time_is_clamped(make_client, pool):
    client = await client_with_stages(make_client)
    late = await client.post("/jobs", json={"type": "record", "run_after": "9999-12-31T23:59:59-23:59"})
    assert late.status_code == 201, late.text
    assert late.json()["job"]["runAfter"] == "9999-01-01T00:00:00+00:00"
    early = await client.post("/jobs", json={"type": "record", "run_after": "0001-01-01T00:00:00+05:00"})
    assert early.json()["job"]["runAfter"] == "1970-01-01T00:00:00+00:00"
    naive = await client.post("/jobs", json={"type": "record", "run_after": "2031-05-06T07:08:09"})
    assert naive.json()["job"]["runAfter"] == "2031-05-06T07:08:09+00:00"


async def test_unknown_ids_are_404_and_malformed_ids_422(make_client, pool):
    client = await client_with_stages(make_client)
    missing = uuid.uuid4()
    assert_error(await client.get(f"/jobs/{missing}"), 404, "not_found")
    assert_error(await client.post(f"/jobs/{missing}/retry"), 404, "not_found")
    assert_error(await client.post(f"/jobs/{missing}/cancel"), 404, "not_found")
    assert_error(await client.get(f"/runs/{missing}"), 404, "not_found")
    assert_error(await client.get("/jobs/not-a-uuid"), 422, "invalid_request")


async def _running(pool, type_="record"):
    [job_id] = await q.enqueue_many(pool, [q.NewJob(type=type_)])
    run_id = await f.run(pool)
    [claimed] = await q.claim(pool, f.lease(type_), run_id, 1)
    assert claimed.id == job_id
    return job_id, run_id


async def test_cancel_a_pending_job_ends_it_cancelled(make_client, pool):
    client = await client_with_stages(make_client)
    job = (await client.post("/jobs", json={"type": "record"})).json()["job"]
    r = await client.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["lastError"]) == ("cancelled", None)
    assert r.json()["finishedAt"] is not None
    again = assert_error(await client.post(f"/jobs/{job['id']}/cancel"), 409, "job_finished")
    assert "cancelled" in again["message"]
    # the fairness counters follow (the lane no longer has a pending job)
    assert await pool.fetchval("SELECT sum(pending) FROM job_lane_counts WHERE type = 'record'") == 0


async def test_cancel_never_stomps_a_running_job(make_client, pool):
    client = await client_with_stages(make_client)
    job_id, run_id = await _running(pool)
    r = await client.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 202 and r.json()["cancelRequestedAt"] is not None, r.text  # asked of its holder
    row = await f.job_row(pool, job_id)
    assert (row["status"], row["run_id"], row["last_error"]) == ("running", run_id, None)
    # the holder still owns it: its completion applies (it finished before it saw the request)
    assert await q.complete(pool, run_id, [job_id]) == [job_id]
    assert_error(await client.post(f"/jobs/{job_id}/cancel"), 409, "job_finished")


async def test_cancel_racing_a_claim_leaves_one_winner(make_client, pool):
    client = await client_with_stages(make_client)
    for _ in range(5):
        [job_id] = await q.enqueue_many(pool, [q.NewJob(type="record")])
        run_id = await f.run(pool)
        cancel, claimed = await asyncio.gather(client.post(f"/jobs/{job_id}/cancel"),
                                               q.claim(pool, f.lease("record"), run_id, 1))
        row = await f.job_row(pool, job_id)
        if cancel.status_code == 200:
            assert claimed == [] and row["status"] == "cancelled"
        else:  # the claim won: the cancel is asked of the run that holds it
            assert cancel.status_code == 202 and [j.id for j in claimed] == [job_id]
            assert row["status"] == "running" and row["cancel_requested_at"] is not None
            await q.complete(pool, run_id, [job_id])


async def test_a_retry_of_a_job_no_loaded_stage_handles_is_refused_naming_it(make_client, pool):
    client = await client_with_stages(make_client)
    job_id = await pool.fetchval("INSERT INTO jobs (type, status, attempts, finished_at, last_error) "
                                 "VALUES ('recrod', 'failed', 3, now(), 'x') RETURNING id")
    r = await client.post(f"/jobs/{job_id}/retry")
    assert_error(r, 422, "unknown_job_type")
    assert "no stage loaded here handles type 'recrod'" in r.json()["error"]["message"]
    assert r.json()["error"]["details"]["unknown"] == ["recrod"]
    assert (await f.job_row(pool, job_id))["status"] == "failed"


async def test_retry_puts_a_failed_job_back_with_attempts_reset(make_client, pool):
    client = await client_with_stages(make_client)
    job_id, run_id = await _running(pool)
    await q.fail(pool, run_id, job_id, "boom", max_attempts=1)
    before = await f.job_row(pool, job_id)
    assert (before["status"], before["attempts"]) == ("failed", 1)
    r = await client.post(f"/jobs/{job_id}/retry")
    assert r.status_code == 200, r.text
    job = r.json()
    assert (job["status"], job["attempts"], job["lastError"], job["finishedAt"]) == ("pending", 0, "boom", None)
    assert datetime.fromisoformat(job["runAfter"]) <= datetime.now(timezone.utc)
    assert datetime.fromisoformat(job["createdAt"]) == before["created_at"]  # its place in lists stays
    # claimable again
    again = await q.claim(pool, f.lease("record"), await f.run(pool), 1)
    assert [j.id for j in again] == [job_id]
    assert_error(await client.post(f"/jobs/{job_id}/retry"), 409, "job_not_failed")


async def test_retry_refuses_pending_and_done_jobs(make_client, pool):
    client = await client_with_stages(make_client)
    job_id, run_id = await _running(pool)
    pending = (await client.post("/jobs", json={"type": "record"})).json()["job"]
    error = assert_error(await client.post(f"/jobs/{pending['id']}/retry"), 409, "job_not_failed")
    assert error["details"] == {"status": "pending"}
    assert_error(await client.post(f"/jobs/{job_id}/retry"), 409, "job_not_failed")
    await q.complete(pool, run_id, [job_id])
    assert_error(await client.post(f"/jobs/{job_id}/retry"), 409, "job_not_failed")


async def test_a_cancelled_job_can_be_retried_unless_its_dedupe_key_was_reused(make_client, pool):
    client = await client_with_stages(make_client)
    job = (await client.post("/jobs", json={"type": "record", "dedupe_key": "d"})).json()["job"]
    await client.post(f"/jobs/{job['id']}/cancel")
    newer = (await client.post("/jobs", json={"type": "record", "dedupe_key": "d"})).json()
    assert newer["created"] is True
    error = assert_error(await client.post(f"/jobs/{job['id']}/retry"), 409, "dedupe_key_taken")
    assert error["details"]["openJob"] == newer["job"]["id"]
    await client.post(f"/jobs/{newer['job']['id']}/cancel")
    retried = await client.post(f"/jobs/{job['id']}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "pending"


class ResizePayload(BaseModel):
    """What a stage of this test declares: an image and the width to make it."""
    model_config = ConfigDict(extra="forbid")
    image_id: uuid.UUID
    width: StrictInt = Field(100, ge=1, le=100)


async def test_a_payload_must_be_what_its_stage_declares(make_client, pool):
    async def noop(job, ctx) -> None:
        return None

    client = await make_client(stages=[Stage(type="resize", handler=noop, payload=ResizePayload)])
    image = str(uuid.uuid4())
    for body, where, needle in (
        ({"type": "resize", "payload": {}}, "body.payload.image_id", "required"),
        ({"type": "resize", "payload": {"image_id": "nope"}}, "body.payload.image_id", "UUID"),
        ({"type": "resize", "payload": {"image_id": image, "extra": 1}}, "body.payload.extra", "not permitted"),
        ({"type": "resize", "payload": {"image_id": image, "width": 101}}, "body.payload.width", "100"),
        ({"type": "resize", "payload": {"image_id": image, "width": 2**31}}, "body.payload.width", "100"),
        # a number is a JSON number: not true (1 to Python), not a string of digits
        ({"type": "resize", "payload": {"image_id": image, "width": True}}, "body.payload.width", "integer"),
        ({"type": "resize", "payload": {"image_id": image, "width": "2"}}, "body.payload.width", "integer"),
    ):
        error = assert_error(await client.post("/jobs", json=body), 422, "invalid_request")
        assert error["details"][0]["location"] == where and needle in error["details"][0]["message"], (body, error)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    # what fits is stored as declared: the fields sent, in their types
    made = await client.post("/jobs", json={"type": "resize", "payload": {"image_id": image.upper(), "width": 2}})
    assert made.status_code == 201, made.text
    assert made.json()["job"]["payload"] == {"image_id": image, "width": 2}


async def test_a_stages_accepts_is_asked_on_the_tenants_own_transaction(make_client, pool):
    async def noop(job, ctx) -> None:
        return None

    async def accepts(db, lane, payload) -> None:
        # what the hook sees: the tenant's role, and row-level security keeps it to its own lanes
        role, lanes = await db.fetchrow("SELECT current_user, (SELECT count(*) FROM lanes)")
        if payload.get("refuse"):
            raise JobRefused(f"refused in {lane} as {role}", {"lanes": lanes})

    client = await make_client(stages=[Stage(type="checked", handler=noop, accepts=accepts)], api_key=False)
    key = await f.api_key(pool, "ann@accepts.example")
    ann, mine = {"Authorization": f"Bearer {key}"}, await f.lane(pool, (await accounts.authenticate(pool, key)).user_id)
    theirs = await f.lane(pool, await f.user(pool))
    refused = await client.post("/jobs", headers=ann, json={"type": "checked", "lane": str(mine),
                                                            "payload": {"refuse": True}})
    error = assert_error(refused, 422, "job_refused")
    assert (error["message"], error["details"]) == (f"refused in {mine} as skiplock_api",
                                                    {"location": "body.payload", "lanes": 1})
    batch = await client.post(f"/lanes/{mine}/batches", headers=ann,
                              json={"jobs": [{"type": "checked", "payload": {"refuse": True}}]})
    assert assert_error(batch, 422, "job_refused")["details"]["location"] == "body.jobs.0.payload"
    # a lane not yours is a 404 before the hook is asked
    assert_error(await client.post(f"/lanes/{theirs}/batches", headers=ann,
                                   json={"jobs": [{"type": "checked", "payload": {"refuse": True}}]}), 404, "not_found")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    taken = await client.post("/jobs", headers=ann, json={"type": "checked", "lane": str(mine), "payload": {}})
    assert taken.status_code == 201, taken.text


async def test_every_failed_attempt_keeps_its_error_newest_first(make_client, pool):
    client = await client_with_stages(make_client)
    [job_id] = await f.jobs(pool, "record", 1)
    runs = []
    for attempt in (1, 2, 3):
        run_id = await f.run(pool)
        runs.append(run_id)
        [job] = await q.claim(pool, f.lease("record"), run_id, 1)
        await q.fail(pool, run_id, job.id, f"upstream said no, time {attempt}", max_attempts=3)
        await pool.execute("UPDATE jobs SET run_after = now() WHERE id = $1", job_id)  # skip the backoff
    shown = (await client.get(f"/jobs/{job_id}")).json()
    assert shown["status"] == "failed" and shown["lastError"] == "upstream said no, time 3"
    assert [(e["attempt"], e["error"], e["runId"]) for e in shown["errors"]] == [
        (3, "upstream said no, time 3", str(runs[2])), (2, "upstream said no, time 2", str(runs[1])),
        (1, "upstream said no, time 1", str(runs[0]))]
    assert all(datetime.fromisoformat(e["at"]) <= datetime.now(timezone.utc) for e in shown["errors"])
    # a list leaves them out; the 20 newest are kept
    listed = (await client.get("/jobs")).json()["data"]
    assert "errors" not in listed[0]
    for n in range(25):
        await pool.execute("UPDATE jobs SET status = 'running', run_id = $2, attempts = attempts + 1 WHERE id = $1",
                           job_id, runs[0])
        await q.fail(pool, runs[0], job_id, f"again {n}", max_attempts=100)
    kept = (await client.get(f"/jobs/{job_id}")).json()["errors"]
    assert len(kept) == 20 and kept[0]["error"] == "again 24" and kept[-1]["error"] == "again 5"
