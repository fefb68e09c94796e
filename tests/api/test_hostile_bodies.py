"""Bounded work per request: one tenant's bodies cannot stall the event loop that serves
everyone else.

The red team's attack, against a real `skiplock serve` (a subprocess): a 0.98 MB JSON
object with 60,000 unknown keys sent to a tenant route (`POST /campaigns`) with a tenant's key, four in
flight for a few seconds, while /health/live is asked every 10 ms. It cost about 0.3 s of
the event loop each before its 422 (most of it building 60,001 validation errors), and took
/health/live from 1-3 ms to p50 384 ms, max 993 ms. Now the shape is refused before it is
parsed (413 body_too_complex) and /health/live stays under 50 ms at p50 and 200 ms at p99,
bounds a stall cannot meet that a busy machine running the suite's other tests still does."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from serving_kit import ServedProcess, assert_error, make_settings

from app.api.body_shape import shape_problem
from app.api.errors import MAX_PROBLEMS
from tests import factories as f

ATTACK_SECONDS = 3.0


@pytest.fixture(scope="module")
def served(dsn):
    server = ServedProcess(dsn)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _exchange(port: int, request: bytes) -> bytes:
    """One request on its own connection (Connection: close), read to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _post(path: str, key: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body


async def test_sixty_thousand_unknown_keys_do_not_stall_the_loop(served, pool):
    key = await f.api_key(pool, "mallory@example.com")  # a tenant, not an admin
    keys = {f"k{i:05d}": "xxxx" for i in range(60_000)}
    body = json.dumps({"type": "record", **keys}, separators=(",", ":")).encode()
    assert 0.95e6 < len(body) < 1_048_576  # under MAX_BODY_BYTES: only its shape is wrong
    request = _post("/jobs", key, body)
    stop = time.monotonic() + ATTACK_SECONDS
    answers: list[bytes] = []

    def attack() -> None:
        while time.monotonic() < stop:
            answers.append(_exchange(served.port, request))

    probe_request = b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    attackers = [threading.Thread(target=attack) for _ in range(4)]
    for thread in attackers:
        thread.start()
    time.sleep(0.2)  # the four are in flight
    seconds = []
    while time.monotonic() < stop:
        started = time.perf_counter()
        assert _exchange(served.port, probe_request).startswith(b"HTTP/1.1 200 ")
        seconds.append(time.perf_counter() - started)
        time.sleep(0.01)
    for thread in attackers:
        thread.join()
    assert len(answers) >= 8 and all(a.startswith(b"HTTP/1.1 413 ") and b"body_too_complex" in a for a in answers)
    seconds.sort()
    p50, p99 = seconds[len(seconds) // 2], seconds[int(len(seconds) * 0.99)]
    # a loop that parsed these bodies would answer the probes after them: the median shows
    # it; the tail only has to stay short of that (a busy 2-core machine reaches 0.2 s)
    assert p50 < 0.050 and p99 < 0.500, (f"/health/live p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms over "
                                          f"{len(seconds)} probes (max {seconds[-1] * 1000:.0f})")


@pytest.mark.parametrize("body, why", [
    ({"type": "record", **{f"k{i}": 1 for i in range(1_001)}}, "more than 1000 keys"),
    ({"type": "record", "payload": {"xs": list(range(10_001))}}, "more than 10000 values"),
    ({"type": "record", "payload": {"xs": ["a"] * 10_001}}, "more than 10000 values"),
    ([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], "nested more than 64"),
])
async def test_every_route_refuses_the_shape_before_parsing(make_client, body, why):
    client = await make_client(make_settings(None))  # refused before a key or a database is asked
    for path in ("/jobs", f"/lanes/{'0' * 8}-0000-0000-0000-{'0' * 12}/batches", "/cron/pipeline"):
        error = assert_error(await client.post(path, json=body), 413, "body_too_complex")
        assert why in error["message"], error["message"]


async def test_a_body_within_the_bounds_is_served_and_its_errors_are_capped(make_client):
    client = await make_client()
    many = {"type": "record", **{f"k{i}": 1 for i in range(900)}}
    error = assert_error(await client.post("/jobs", json=many), 422, "invalid_request")
    assert len(error["details"]) == MAX_PROBLEMS  # not 900: the answer is bounded too


def test_the_count_reads_strings_and_escapes_as_json_does():
    assert shape_problem(json.dumps({"a": "x," * 50_000, "b": '\\"{[:' * 5_000}).encode(), 100, 10) is None
    assert shape_problem(json.dumps(["a"] * 101).encode(), 100, 10) is not None
    assert shape_problem(json.dumps({f"k{i}": [1] for i in range(11)}).encode(), 1000, 10) is not None
    assert shape_problem(json.dumps([{f"k{i}": 1 for i in range(10)}] * 20).encode(), 1000, 10) is None
