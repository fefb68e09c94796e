"""POST /jobs with unique_for (a dedupe key taken for a window after its job ends) and
on_conflict replace (a debounce): the answers, the refusals, a tenant's own lane, and the
audit of a replace."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from serving_kit import Recorder, assert_error
from test_redis import redis_server, settings_for  # noqa: F401  (a fixture, and its settings)

from tests import factories as f


async def client_with_stages(make_client):
    return await make_client(stages=[Recorder("record").stage, Recorder("export").stage])


async def end_job(pool, job_id: str, seconds_ago: float = 0) -> None:
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() - make_interval(secs => $2) "
                       "WHERE id = $1", uuid.UUID(job_id), seconds_ago)


async def test_inside_the_window_an_enqueue_answers_as_for_an_open_job(make_client, pool):
    client = await client_with_stages(make_client)
    body = {"type": "record", "dedupe_key": "digest:acct1", "unique_for": 3600}
    first = await client.post("/jobs", json=body)
    assert first.status_code == 201 and first.json()["replaced"] is False
    job = first.json()["job"]
    await end_job(pool, job["id"])

    inside = await client.post("/jobs", json={**body, "payload": {"again": True}})
    assert inside.status_code == 200, inside.text
    assert (inside.json()["created"], inside.json()["replaced"]) == (False, False)
    assert inside.json()["job"]["id"] == job["id"] and inside.json()["job"]["status"] == "done"
    assert inside.headers["location"] == f"/jobs/{job['id']}"

    await end_job(pool, job["id"], seconds_ago=3601)
    after = await client.post("/jobs", json=body)
    assert after.status_code == 201 and after.json()["job"]["id"] != job["id"]


async def test_replace_gives_the_pending_job_the_new_payload_and_run_after_and_is_audited(make_client, pool):
    client = await client_with_stages(make_client)
    body = {"type": "record", "dedupe_key": "sync:1", "payload": {"n": 1}, "run_after": "2030-01-01T00:00:00Z"}
    job = (await client.post("/jobs", json=body)).json()["job"]
    replaced = await client.post("/jobs", json={**body, "payload": {"n": 2}, "run_after": "2030-01-01T00:05:00Z",
                                                 "on_conflict": "replace"})
    assert replaced.status_code == 200, replaced.text
    answer = replaced.json()
    assert (answer["created"], answer["replaced"], answer["job"]["id"]) == (False, True, job["id"])
    assert answer["job"]["payload"] == {"n": 2}
    assert datetime.fromisoformat(answer["job"]["runAfter"]) == datetime(2030, 1, 1, 0, 5, tzinfo=timezone.utc)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    audited = await pool.fetch("SELECT actor_kind, new_row -> 'payload' AS payload FROM audit_log "
                               "WHERE table_name = 'jobs' AND op = 'UPDATE' AND row_id = $1", job["id"])
    assert [(r["actor_kind"], r["payload"]) for r in audited] == [("admin", {"n": 2})]

    # a running job is not touched: the answer is it, as for a duplicate
    await pool.execute("UPDATE jobs SET status = 'running', attempts = 1, locked_at = now() WHERE id = $1",
                       uuid.UUID(job["id"]))
    running = await client.post("/jobs", json={**body, "payload": {"n": 3}, "on_conflict": "replace"})
    assert running.status_code == 200
    assert (running.json()["replaced"], running.json()["job"]["payload"]) == (False, {"n": 2})


async def test_bad_windows_and_conflict_modes_are_422s(make_client, pool):
    client = await client_with_stages(make_client)
    needed = assert_error(await client.post("/jobs", json={"type": "record", "unique_for": 60}), 422,
                          "dedupe_key_needed")
    assert "dedupe key" in needed["message"]
    assert_error(await client.post("/jobs", json={"type": "record", "on_conflict": "replace"}), 422,
                 "dedupe_key_needed")
    for bad in ({"unique_for": -1}, {"unique_for": "an hour"}, {"unique_for": "60"}, {"unique_for": True},
                {"unique_for": 1e12},
                {"on_conflict": "merge"}, {"on_conflict": None}):
        assert_error(await client.post("/jobs", json={"type": "record", "dedupe_key": "k", **bad}), 422,
                     "invalid_request")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_tenant_meets_and_ends_windows_in_its_own_lane(make_client, pool):
    """The trigger that lets an expired key go runs for a tenant's key too (row-level
    security, the API's role), and another tenant's key of the same name is its own."""
    client = await client_with_stages(make_client)
    alice, bob = await f.tenant(pool, "alice@example.com"), await f.tenant(pool, "bob@example.com")
    body = {"type": "record", "dedupe_key": "digest", "unique_for": 3600}
    job = (await client.post("/jobs", json={**body, "lane": str(alice.lane)}, headers=alice.headers)).json()["job"]
    await end_job(pool, job["id"])
    inside = await client.post("/jobs", json={**body, "lane": str(alice.lane)}, headers=alice.headers)
    assert inside.status_code == 200 and inside.json()["job"]["id"] == job["id"]
    other = await client.post("/jobs", json={**body, "lane": str(bob.lane)}, headers=bob.headers)
    assert other.status_code == 201

    await end_job(pool, job["id"], seconds_ago=3601)
    after = await client.post("/jobs", json={**body, "lane": str(alice.lane)}, headers=alice.headers)
    assert after.status_code == 201, after.text
    replaced = await client.post("/jobs", json={**body, "lane": str(alice.lane), "payload": {"x": 1},
                                                "on_conflict": "replace"}, headers=alice.headers)
    assert replaced.json()["replaced"] is True and replaced.json()["job"]["id"] == after.json()["job"]["id"]


async def test_a_replace_drops_the_cached_copy_of_the_job(make_client, dsn, pool, redis_server):
    client = await make_client(settings_for(dsn, redis_server), stages=[Recorder("record").stage])
    body = {"type": "record", "dedupe_key": "sync:1", "payload": {"n": 1}}
    job = (await client.post("/jobs", json=body)).json()["job"]
    assert (await client.get(f"/jobs/{job['id']}")).headers["x-cache"] == "miss"
    await client.post("/jobs", json={**body, "payload": {"n": 2}, "on_conflict": "replace"})
    after = await client.get(f"/jobs/{job['id']}")
    assert after.headers["x-cache"] == "miss" and after.json()["payload"] == {"n": 2}
