"""Idempotency-Key: the first answer replayed, a reused key refused, concurrent
requests acting once, answers that are not kept, a request cut off mid-body, keys scoped
to the caller whose API key is looked up once a request, and expiry by maintenance."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from serving_kit import AUTH, Recorder, assert_error, make_settings

from app.api.idempotency import fingerprint, scoped_key
from app.engine import accounts
from app.engine.accounts import KEY_SHAPE
from app.engine import idempotency as store
from app.engine.tenancy import acting
from app.pipeline.maintenance import RECURRING, expire_idempotency_keys
from tests import factories as f


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def test_same_key_same_request_replays_the_first_answer(make_client, pool, via):
    client = await make_client(stages=[Recorder("record").stage], via=via)
    k = key()
    first = await client.post("/jobs", json={"type": "record", "payload": {"a": 1, "b": [1, 2]}}, headers=k)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    # same body, other key order and spacing: the same request
    again = await client.post("/jobs", content=b'{"payload": {"b": [1, 2], "a": 1},   "type": "record"}',
                              headers={**k, "Content-Type": "application/json"})
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == first.headers["location"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    # without the key, the same body acts again
    assert (await client.post("/jobs", json={"type": "record"})).status_code == 201
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2


async def test_cancel_and_error_answers_replay_too(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    job = (await client.post("/jobs", json={"type": "record"})).json()["job"]
    k = key()
    first = await client.post(f"/jobs/{job['id']}/cancel", headers=k)
    assert first.status_code == 200
    # a plain second cancel is a 409; the retried one with the key gets the first answer
    assert (await client.post(f"/jobs/{job['id']}/cancel")).status_code == 409
    replay = await client.post(f"/jobs/{job['id']}/cancel", headers=k)
    assert (replay.status_code, replay.json()) == (200, first.json())
    k2 = key()
    unknown = await client.post("/jobs", json={"type": "nope"}, headers=k2)
    assert_error(unknown, 422, "unknown_job_type")
    assert (await client.post("/jobs", json={"type": "nope"}, headers=k2)).headers["idempotent-replayed"] == "true"


async def test_same_key_with_another_request_is_422(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("export").stage])
    k = key()
    assert (await client.post("/jobs", json={"type": "record"}, headers=k)).status_code == 201
    body = assert_error(await client.post("/jobs", json={"type": "export"}, headers=k), 422, "idempotency_key_reused")
    assert "different body" in body["message"]
    job_id = (await pool.fetchval("SELECT id FROM jobs"))
    elsewhere = assert_error(await client.post(f"/jobs/{job_id}/cancel", headers=k), 422, "idempotency_key_reused")
    assert elsewhere["details"]["firstRequest"] == {"method": "POST", "path": "/jobs"}
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    assert (await f.job_row(pool, job_id))["status"] == "pending"


async def test_bad_keys_are_400(make_client):
    client = await make_client(stages=[Recorder("record").stage])
    for bad in ("", "has space", "x" * 256, "é"):
        r = await client.post("/jobs", json={"type": "record"}, headers={"Idempotency-Key": bad.encode()})
        assert_error(r, 400, "invalid_idempotency_key")


async def test_concurrent_requests_with_one_key_act_once(make_client, pool, via):
    client = await make_client(stages=[Recorder("record").stage], via=via)
    k = key()
    answers = await asyncio.gather(*(client.post("/jobs", json={"type": "record"}, headers=k) for _ in range(10)))
    assert [a.status_code for a in answers] == [201] * 10
    assert len({a.json()["job"]["id"] for a in answers}) == 1
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 9
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_concurrent_pipeline_triggers_with_one_key_run_once(make_client, pool, dsn):
    recorder = Recorder("record", delay=0.2)
    client = await make_client(make_settings(dsn, idempotency_wait_seconds=10), stages=[recorder.stage])
    await f.jobs(pool, "record", 3)
    headers = {**AUTH, **key()}
    answers = await asyncio.gather(*(client.post("/cron/pipeline", headers=headers) for _ in range(4)))
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert await pool.fetchval("SELECT count(*) FROM runs") == 1
    assert len(recorder.seen) == 3


def stored_key(client, key: str) -> str:
    """How the key is stored for requests made with this client's API key: in the
    namespace of the key's prefix, its public id."""
    token = client.headers["authorization"].split()[-1]
    return scoped_key(key, f"key:{KEY_SHAPE.match(token).group(1)}")


async def test_a_request_still_in_progress_makes_the_next_one_wait_then_409(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, idempotency_wait_seconds=0.3), stages=[Recorder("record").stage])
    k = stored_key(client, "held-by-someone")
    fp = fingerprint("POST", "/jobs", b"", b'{"type":"record"}')
    assert await store.claim(pool, k, "POST", "/jobs", fp) is not None
    error = assert_error(await client.post("/jobs", json={"type": "record"}, headers={"Idempotency-Key": k.split(":")[-1]}),
                         409, "idempotency_in_progress")
    assert "still in progress" in error["message"]
    # a holder that died (held longer than any request lives) is taken over
    await pool.execute("UPDATE idempotency_keys SET claimed_at = now() - interval '1 hour' WHERE key = $1", k)
    taken = await client.post("/jobs", json={"type": "record"}, headers={"Idempotency-Key": k.split(":")[-1]})
    assert taken.status_code == 201
    assert await pool.fetchval("SELECT status FROM idempotency_keys WHERE key = $1", k) == 201


async def test_the_waiting_request_gets_the_first_answer_when_it_comes(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, idempotency_wait_seconds=5), stages=[Recorder("record").stage])
    k = stored_key(client, "slow-first")
    fp = fingerprint("POST", "/jobs", b"", b'{"type":"record"}')
    token = await store.claim(pool, k, "POST", "/jobs", fp)

    async def first_answers():
        await asyncio.sleep(0.3)
        await store.store(pool, k, token, 201, {"content-type": "application/json"}, b'{"from":"first"}')

    second, _ = await asyncio.gather(client.post("/jobs", json={"type": "record"}, headers={"Idempotency-Key": k.split(":")[-1]}),
                                     first_answers())
    assert (second.status_code, second.json()) == (201, {"from": "first"})
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_refused_credentials_and_server_errors_give_the_key_back(make_client, pool, dsn):
    client = await make_client(stages=[Recorder("record").stage])
    k = key()
    wrong = await client.post("/cron/pipeline", headers={**k, "Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    assert await pool.fetchval("SELECT count(*) FROM idempotency_keys") == 0
    right = await client.post("/cron/pipeline", headers={**k, **AUTH})
    assert right.status_code == 200
    replay = await client.post("/cron/pipeline", headers={**k, **AUTH})
    assert replay.json()["id"] == right.json()["id"]
    assert await pool.fetchval("SELECT count(*) FROM runs") == 1

    # a 5xx is not kept: here the database is unreachable for the app, but not for us
    down = await make_client(make_settings("postgresql://postgres@127.0.0.1:1/none"), stages=[])
    r = await down.post("/jobs", json={"type": "record"}, headers=k)
    assert_error(r, 503, "database_unavailable")


async def test_a_request_cut_off_mid_body_leaves_its_key_for_the_retry(make_client, pool, admin_key):
    """The connection drops after part of the body: acting on the part would store its 422
    under the key, and the client's retry of the whole request would be refused as a
    reuse of the key."""
    client = await make_client(stages=[Recorder("record").stage], via="uvicorn")
    k = key()
    body = b'{"type": "record", "payload": {"note": "' + b"x" * 100 + b'"}}'
    head = "\r\n".join(["POST /jobs HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {admin_key}",
                         "Content-Type: application/json", f"Idempotency-Key: {k['Idempotency-Key']}",
                         f"Content-Length: {len(body)}", "", ""]).encode()
    for cut in (0, 40, len(body) - 1):
        _, writer = await asyncio.open_connection(client.base_url.host, client.base_url.port)
        writer.write(head + body[:cut])
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()
        await writer.wait_closed()
    await asyncio.sleep(0.3)
    assert await pool.fetchval("SELECT count(*) FROM idempotency_keys") == 0
    retry = await client.post("/jobs", content=body, headers={**k, "Content-Type": "application/json"})
    assert retry.status_code == 201, retry.text
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


@pytest.fixture
def key_lookups(monkeypatch) -> list[str]:
    """The API keys looked up in the database (accounts.authenticate runs api_key_lookup),
    one entry a lookup, counted around the real function."""
    seen: list[str] = []
    authenticate = accounts.authenticate

    async def counted(db, key: str):
        seen.append(key)
        return await authenticate(db, key)

    monkeypatch.setattr(accounts, "authenticate", counted)
    return seen


async def test_a_request_with_a_key_looks_its_api_key_up_once(make_client, pool, via, key_lookups):
    """The Idempotency layer authenticates the request to scope its key; the route's
    tenant transaction takes the actor it found instead of asking the database again."""
    ann = await f.tenant(pool, "ann@once.example")
    client = await make_client(stages=[Recorder("record").stage], via=via, api_key=False)
    k, body = key(), {"type": "record", "lane": str(ann.lane)}
    first = await client.post("/jobs", json=body, headers={**ann.headers, **k})
    assert first.status_code == 201, first.text
    assert key_lookups == [ann.key]
    replay = await client.post("/jobs", json=body, headers={**ann.headers, **k})
    assert replay.headers["idempotent-replayed"] == "true"
    assert key_lookups == [ann.key] * 2  # each request is authenticated afresh
    assert (await client.post("/jobs", json=body, headers=ann.headers)).status_code == 201
    assert key_lookups == [ann.key] * 3  # without the header, the route's own lookup
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2


async def test_a_key_is_the_callers_own_and_a_revoked_key_gets_no_replay(make_client, pool, key_lookups):
    ann, bob = await f.tenant(pool, "ann@scoped.example"), await f.tenant(pool, "bob@scoped.example")
    client = await make_client(stages=[Recorder("record").stage], api_key=False)
    k = key()
    anns = await client.post("/jobs", json={"type": "record", "lane": str(ann.lane)}, headers={**ann.headers, **k})
    assert anns.status_code == 201, anns.text
    # the same Idempotency-Key from another tenant is another key: Bob's request acts, as Bob
    bobs = await client.post("/jobs", json={"type": "record", "lane": str(bob.lane)}, headers={**bob.headers, **k})
    assert bobs.status_code == 201, bobs.text
    assert "idempotent-replayed" not in bobs.headers
    assert bobs.json()["job"]["lane"] == str(bob.lane) != anns.json()["job"]["lane"]
    assert key_lookups == [ann.key, bob.key]
    # Ann's key revoked: her retry is a 401, not her stored answer, and the key is not spent
    async with acting(pool, f.TEST_ACTOR) as conn:
        assert await accounts.revoke_key(conn, KEY_SHAPE.match(ann.key).group(1))
    refused = await client.post("/jobs", json={"type": "record", "lane": str(ann.lane)}, headers={**ann.headers, **k})
    assert_error(refused, 401, "unauthorized")
    assert "idempotent-replayed" not in refused.headers
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2


async def test_expiry_forgets_old_keys_in_maintenance(pool, dsn):
    assert "expire_idempotency_keys" in [r.task for r in RECURRING]
    for i in range(3):
        await store.claim(pool, f"k{i}", "POST", "/jobs", "fp")
    await pool.execute("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key <> 'k2'")

    class Ctx:
        settings = make_settings(dsn)
        counted: dict = {}

        def time_left(self):
            return 60

        def count(self, name, n):
            self.counted[name] = n

    ctx = Ctx()
    assert await expire_idempotency_keys(pool, [], ctx) == 2
    assert ctx.counted == {"idempotency_expired": 2}
    assert [r["key"] for r in await pool.fetch("SELECT key FROM idempotency_keys")] == ["k2"]
