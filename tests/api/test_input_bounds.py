"""The API's input boundary, attacked: the requests that used to be 500s, a 20 MB body,
a 60 KiB payload in the append-only audit log, undeclared methods, and Idempotency-Key
replays to a revoked key or another spelling of the same one."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

from serving_kit import AUTH, Recorder, assert_error, make_settings

from app.engine import accounts
from app.pipeline.payloads import MAX_DEPTH
from tests import factories as f

MIB = 1024 * 1024


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def batch_client(make_client, pool, via: str = "asgi"):
    client = await make_client(stages=[Recorder("record").stage], via=via)
    return client, await f.lane(pool, await f.user(pool))


# -- the three known 500s ------------------------------------------------------------

async def test_a_nul_nested_in_a_batch_payload_is_422_naming_where(make_client, pool):
    client, c = await batch_client(make_client, pool)
    for payload, where in (({"a": {"b": ["ok", "x\u0000y"]}}, "body.jobs.0.payload.a.b.1"),
                           ({"a": {"k\u0000": 1}}, "body.jobs.0.payload.a.k\\x00")):
        r = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record", "payload": payload}]})
        error = assert_error(r, 422, "invalid_request")
        assert error["details"][0]["location"] == where, error
        assert "NUL" in error["details"][0]["message"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pool.fetchval("SELECT count(*) FROM batches") == 0


async def test_a_total_beyond_the_bound_is_422_not_an_int4_overflow(make_client, pool):
    client, c = await batch_client(make_client, pool)
    for total in (2**31, 10**30, 1_000_001, -1):
        r = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record", "total": total}]})
        error = assert_error(r, 422, "invalid_request")
        assert error["details"][0]["location"] == "body.jobs.0.total", error
    ok = await client.post(f"/lanes/{c}/batches", json={"jobs": [{"type": "record", "total": 1_000_000}]})
    assert ok.status_code == 201, ok.text
    assert await pool.fetchval("SELECT total FROM jobs") == 1_000_000


async def test_what_jsonb_cannot_hold_is_422_not_500(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    deep: object = "bottom"
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    bodies = [
        b'{"type": "record", "payload": {"a": NaN}}',
        b'{"type": "record", "payload": {"a": [1e999]}}',
        json.dumps({"type": "record", "payload": {"deep": deep}}).encode(),
        b'{"type": "record", "payload": {"\\ud800": 1}}',      # a lone surrogate: not UTF-8
        b'{"type": "record", "dedupe_key": "a\\u0000b"}',
    ]
    for body in bodies:
        for headers in ({}, key()):  # the Idempotency layer reads the body too
            r = await client.post("/jobs", content=body, headers={"Content-Type": "application/json", **headers})
            assert_error(r, 422, "invalid_request")
    # nested past what the JSON parser takes at all: a 400, with a key or without
    too_deep = b'{"type": "record", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for headers in ({}, key()):
        r = await client.post("/jobs", content=too_deep, headers={"Content-Type": "application/json", **headers})
        assert 400 <= r.status_code < 500, r.text
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_nul_in_a_path_parameter_with_a_key_is_a_4xx(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    r = await client.post("/jobs/%00/cancel", headers=key())
    assert_error(r, 422, "invalid_request")


# -- size caps -----------------------------------------------------------------------

async def stream_until_answered(port: int, head: bytes, total: int, chunk: int = 64 * 1024) -> tuple[bytes, int]:
    """Send `head`, then up to `total` bytes of chunked body while nobody answers; return
    the answer and how many body bytes went out before it came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = asyncio.create_task(_read_answer(reader))
    frame = f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n"
    sent = 0
    try:
        async with asyncio.timeout(30):  # a server that never answers fails the test, not hangs it
            writer.write(head)
            try:
                while sent < total and not answer.done():
                    writer.write(frame)
                    await writer.drain()
                    sent += chunk
                    await asyncio.sleep(0)
                if not answer.done():
                    writer.write(b"0\r\n\r\n")
            except ConnectionError:
                pass  # the server answered and hung up mid-upload
            return await answer, sent
    finally:
        answer.cancel()
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    return head + await reader.readexactly(length)


def _head(path: str, auth: str, *lines: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: {auth}",
                        "Content-Type: application/json", *lines, "", ""]).encode()


async def test_a_20_mb_chunked_body_is_413_before_it_is_all_sent(make_client, pool, admin_headers):
    client = await make_client(stages=[Recorder("record").stage], via="uvicorn")
    port = client.base_url.port
    total = 20 * 1000 * 1000
    for extra in ([], ["Idempotency-Key: big-body"]):
        raw, sent = await stream_until_answered(
            port, _head("/jobs", admin_headers["Authorization"], "Transfer-Encoding: chunked", *extra), total)
        assert raw.startswith(b"HTTP/1.1 413 "), raw[:200]
        body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "payload_too_large"
        assert sent < total // 2, sent  # answered while most of the body was still to come
        print(f"413 after {sent} of {total} bytes sent ({extra or 'no key'})")
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pool.fetchval("SELECT count(*) FROM idempotency_keys") == 0


async def test_a_declared_20_mb_body_is_refused_before_a_byte_of_it(make_client, admin_headers):
    client = await make_client(stages=[Recorder("record").stage], via="uvicorn")
    raw, sent = await stream_until_answered(
        client.base_url.port, _head("/jobs", admin_headers["Authorization"], "Content-Length: 20000000"), 0)
    assert raw.startswith(b"HTTP/1.1 413 ") and sent == 0, raw[:200]


async def test_the_body_cap_is_a_setting_and_counts_every_route(make_client, dsn):
    client = await make_client(make_settings(dsn, max_body_bytes=4096, max_payload_bytes=1024),
                               stages=[Recorder("record").stage])
    just_under = {"type": "record", "payload": {"a": "x" * 900}}
    assert (await client.post("/jobs", json=just_under)).status_code == 201
    over = json.dumps({"type": "record", "payload": {"a": "x" * 5000}})
    for path in ("/jobs", f"/jobs/{uuid.uuid4()}/cancel", "/cron/pipeline"):
        r = await client.post(path, content=over, headers={**key(), **(AUTH if "cron" in path else {})})
        error = assert_error(r, 413, "payload_too_large")
        assert error["details"] == {"maxBodyBytes": 4096}


async def test_a_payload_over_the_cap_is_422(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    r = await client.post("/jobs", json={"type": "record", "payload": {"blob": "a" * (70 * 1024)}})
    error = assert_error(r, 422, "invalid_request")
    assert error["details"][0]["location"] == "body.payload"
    assert "at most 65536" in error["details"][0]["message"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_60_kib_payload_leaves_small_audit_rows(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    payload = {"blob": "a" * (60 * 1024)}
    job = (await client.post("/jobs", json={"type": "record", "payload": payload})).json()["job"]
    assert job["payload"] == payload  # the job keeps all of it
    for action in ("cancel", "retry", "cancel"):
        assert (await client.post(f"/jobs/{job['id']}/{action}")).status_code == 200
    rows = await pool.fetch("SELECT op, old_row, new_row, octet_length(coalesce(old_row::text, '')) "
                            "+ octet_length(coalesce(new_row::text, '')) AS size "
                            "FROM audit_log WHERE table_name = 'jobs' ORDER BY id")
    assert [r["op"] for r in rows] == ["INSERT", "UPDATE", "UPDATE", "UPDATE"]
    assert max(r["size"] for r in rows) < 4096, [r["size"] for r in rows]
    stored = await pool.fetchrow("SELECT encode(sha256(convert_to(payload::text, 'UTF8')), 'hex') AS sha, "
                                 "octet_length(payload::text) AS bytes FROM jobs")
    for r in rows:
        for image in (r["old_row"], r["new_row"]):
            if image is not None:
                assert "payload" not in image
                assert (image["payloadSha256"], image["payloadBytes"]) == (stored["sha"], stored["bytes"])
    print(f"audit rows for a {stored['bytes']} byte payload: {[r['size'] for r in rows]} bytes")
    # a small payload is still kept whole
    small = (await client.post("/jobs", json={"type": "record", "payload": {"n": 1}})).json()["job"]
    image = await pool.fetchval("SELECT new_row FROM audit_log WHERE row_id = $1", small["id"])
    assert image["payload"] == {"n": 1} and "payloadSha256" not in image


# -- routing before idempotency ------------------------------------------------------

async def test_undeclared_methods_are_405_and_unknown_paths_404_before_any_key(make_client, pool, via):
    client = await make_client(stages=[Recorder("record").stage], via=via)
    k = key()
    assert (await client.post("/jobs", json={"type": "record"}, headers=k)).status_code == 201
    for method, path, allowed in (("PATCH", "/cron/pipeline", "GET, POST"), ("PUT", "/jobs", "GET, HEAD, POST"),
                                  ("DELETE", f"/jobs/{uuid.uuid4()}", "GET, HEAD"),
                                  ("TRACE", "/cron/pipeline", "GET, POST")):
        r = await client.request(method, path, headers={**k, **AUTH} if "cron" in path else k)
        error = assert_error(r, 405, "method_not_allowed")
        assert r.headers["allow"] == allowed and error["details"] == {"allowed": allowed.split(", ")}
    assert_error(await client.post("/nowhere", headers=k, content=b"x" * 10), 404, "not_found")
    assert await pool.fetchval("SELECT count(*) FROM idempotency_keys") == 1


async def test_head_answers_as_get_without_a_body(make_client, pool, via):
    """HEAD was a 405 on every FastAPI route (/health/live included): now the GET's status and
    headers, no body; auth still applies. Never on the trigger, whose GET runs the pipeline."""
    client = await make_client(stages=[Recorder("record").stage], via=via)
    assert (await client.post("/jobs", json={"type": "record"})).status_code == 201
    for path in ("/health/live", "/jobs?limit=1", "/openapi.json", "/dashboard"):
        get, head = await client.get(path), await client.head(path)
        assert head.status_code == get.status_code == 200, (path, head.status_code)
        assert head.content == b"" and get.content, path
        assert head.headers["content-type"] == get.headers["content-type"], path
        assert head.headers["content-length"] == get.headers["content-length"], path
    unauthorized = await client.head("/jobs", headers={"Authorization": "Bearer nope"})
    assert unauthorized.status_code == 401 and unauthorized.content == b""
    trigger = await client.head("/cron/pipeline", headers=AUTH)
    assert trigger.status_code == 405 and trigger.headers["allow"] == "GET, POST"
    assert await pool.fetchval("SELECT count(*) FROM runs") == 0


# -- idempotency: authenticated first, scoped by the key's id -------------------------

async def test_a_revoked_key_gets_401_never_the_stored_answer(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage], api_key=False)
    api_key = await f.api_key(pool, "ann@example.com", admin=True)
    auth = {"Authorization": f"Bearer {api_key}"}
    k = key()
    first = await client.post("/jobs", json={"type": "record"}, headers={**auth, **k})
    assert first.status_code == 201
    replay = await client.post("/jobs", json={"type": "record"}, headers={**auth, **k})
    assert replay.headers["idempotent-replayed"] == "true"
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true)")
        assert await accounts.revoke_key(conn, api_key[:12])
    for headers in (auth, {"Authorization": "Bearer slk_00000000_" + "x" * 43}, {}):
        r = await client.post("/jobs", json={"type": "record"}, headers={**headers, **k})
        assert_error(r, 401, "unauthorized")
        assert "idempotent-replayed" not in r.headers
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_another_spelling_of_the_same_key_is_the_same_namespace(make_client, pool, admin_key):
    client = await make_client(stages=[Recorder("record").stage], api_key=False)
    k = key()
    answers = [await client.post("/jobs", json={"type": "record"}, headers={"Authorization": f"{scheme} {admin_key}", **k})
               for scheme in ("Bearer", "bearer", "BEARER")]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert [a.headers.get("idempotent-replayed") for a in answers] == [None, "true", "true"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    # another key of the same admin is another namespace: it acts
    other = await f.api_key(pool, "admin@example.com", admin=True)
    again = await client.post("/jobs", json={"type": "record"}, headers={"Authorization": f"Bearer {other}", **k})
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2
