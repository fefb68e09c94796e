"""Slow clients against a real `skiplock serve` (a subprocess on 127.0.0.1), as a container
served directly would meet them.

The red team held 150 connections that sent a header line every 10 s (all still held after
70 s), and a POST declaring 1,000 bytes that sent 1 had no answer after 15 s. Here the
deadlines are shortened to a second so the same attacks take a few seconds."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from serving_kit import ServedProcess

HEADER_SECONDS = 1.0
BODY_SECONDS = 1.0
MOST_UNFINISHED = 40


@pytest.fixture(scope="module")
def served(dsn):
    server = ServedProcess(dsn, REQUEST_HEADER_TIMEOUT_SECONDS=str(HEADER_SECONDS),
                           REQUEST_BODY_TIMEOUT_SECONDS=str(BODY_SECONDS), UNFINISHED_CONNECTIONS_MAX=str(MOST_UNFINISHED))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


async def _probe(base: str, until: float) -> list[float]:
    """/health/live on fresh connections until `until`, at least once (a busy machine may
    take that long to make the client): each answer's seconds."""
    seconds = []
    async with httpx.AsyncClient(base_url=base, timeout=5, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while not seconds or time.monotonic() < until:
            started = time.monotonic()
            assert (await client.get("/health/live")).status_code == 200
            seconds.append(time.monotonic() - started)
            await asyncio.sleep(0.05)
    return seconds


async def _slowloris(port: int, every: float, until: float) -> float | None:
    """One connection sending a header line every `every` seconds: when the server closed
    it (seconds after it opened), or None if it was still open at `until`."""
    opened = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while time.monotonic() < until:
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1024), every) == b"":
                    return time.monotonic() - opened
            except asyncio.TimeoutError:
                writer.write(b"X-Slow: one more line\r\n")
        writer.close()
        return None
    except (ConnectionError, OSError):
        return time.monotonic() - opened


async def test_headers_that_never_finish_are_cut_and_others_still_served(served):
    """150 connections sending a header line every 0.3 s (the red team: every 10 s, against no
    deadline at all): each is closed about REQUEST_HEADER_TIMEOUT_SECONDS after it opened, past
    UNFINISHED_CONNECTIONS_MAX the oldest sooner, and /health/live answers everyone else."""
    until = time.monotonic() + HEADER_SECONDS + 3
    attackers = [asyncio.create_task(_slowloris(served.port, 0.3, until)) for _ in range(150)]
    probes = await _probe(served.base, until)
    closed = await asyncio.gather(*attackers)
    assert None not in closed, f"{closed.count(None)} of 150 slow connections were still open"
    assert max(closed) < HEADER_SECONDS + 1.5, max(closed)
    # the cap: at most MOST_UNFINISHED waited out the deadline, the rest were cut as the oldest
    assert sum(1 for c in closed if c < HEADER_SECONDS * 0.8) >= 150 - MOST_UNFINISHED - 5
    assert max(probes) < 1.0 and sorted(probes)[len(probes) // 2] < 0.1, probes


async def test_silent_connections_are_capped(served):
    """Connections that send nothing at all (uvicorn had no deadline before the first byte)."""
    opened = [await asyncio.open_connection("127.0.0.1", served.port) for _ in range(3 * MOST_UNFINISHED)]
    await asyncio.sleep(0.3)
    still_open = 0
    for reader, writer in opened:
        try:
            still_open += await asyncio.wait_for(reader.read(1), 0.01) != b""
        except asyncio.TimeoutError:
            still_open += 1
        except ConnectionError:
            pass
    assert still_open <= MOST_UNFINISHED, still_open
    assert (await _probe(served.base, time.monotonic() + 0.2))[0] < 1.0
    await asyncio.sleep(HEADER_SECONDS + 0.5)
    for reader, writer in opened:
        try:
            assert await asyncio.wait_for(reader.read(1), 1) == b""
        except ConnectionError:
            pass
        writer.close()


@pytest.mark.parametrize("path", ["/jobs", "/lanes/00000000-0000-0000-0000-000000000000/batches"])
async def test_a_body_that_never_comes_is_408_and_closed(served, path):
    """A POST declaring 1,000 bytes that sends 1: 408 request_timeout within the deadline, then
    the connection is closed (no key was needed to hold it, nor is one needed to be cut)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    started = time.monotonic()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Content-Length: 1000\r\n\r\n{".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), BODY_SECONDS + 5)  # to EOF: the server closes it
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"code":"request_timeout"' in answer and b"connection: close" in answer.lower()
    assert BODY_SECONDS - 0.1 < took < BODY_SECONDS + 2, took
    writer.close()
