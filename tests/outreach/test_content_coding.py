"""Compressed replies: every coding we offer is undone, and a decompression bomb (about
1 MB that stands for 1 GiB of zeros) ends as "too_large" having cost at most a few caps
of memory, measured as the peak RSS of a fresh process that makes the one fetch."""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import brotli
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.outreach.web import WebClient
from tests.outreach.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
MIB_ZEROS = bytes(1 << 20)
CRC32_OF_A_GIB_OF_ZEROS = 0x5B64C2B0   # zlib.crc32(bytes(2**30))
ADLER32_OF_A_GIB_OF_ZEROS = ((GIB % 65521) << 16) | 1  # a stays 1; b adds 1 per byte
PAGE = "<title>Squeezed</title><p>" + "trail gear " * 200 + "</p>"
_WORDS = "tent stove boots trail map ridge lake pine summit rope pack".split()
# About 1.4 MB that does not compress much: it crosses many chunks, pieces and brotli's
# narrowed window (it is compressed with the largest one).
LARGE_PAGE = "<p>" + " ".join(random.Random(7).choices(_WORDS, k=250_000)) + "</p>"


def deflated_gib_of_zeros() -> bytes:
    """Raw deflate of 1 GiB of zeros, made the way a streaming compressor makes it, one
    MiB at a time. Each MiB ends with a full flush, which resets the compressor, so every
    MiB compresses to the same bytes: they are computed once and repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    one = c.compress(MIB_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(MIB_ZEROS) + c.flush(zlib.Z_FULL_FLUSH) == one  # the reset really happens
    return one * (GIB // len(MIB_ZEROS)) + c.flush()


def bombs() -> dict[str, bytes]:
    raw = deflated_gib_of_zeros()
    gz = (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + raw
          + struct.pack("<II", CRC32_OF_A_GIB_OF_ZEROS, GIB & 0xFFFFFFFF))
    wrapped = b"\x78\xda" + raw + struct.pack(">I", ADLER32_OF_A_GIB_OF_ZEROS)
    c = brotli.Compressor(quality=1, lgwin=24)  # the largest window: 16 MiB for a decoder to hold
    br = b"".join(c.process(MIB_ZEROS) for _ in range(GIB // len(MIB_ZEROS))) + c.finish()
    return {"gzip": gz, "deflate": wrapped, "deflate-raw": raw, "br": br}


def encoded(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "deflate":
        return zlib.compress(data)
    if coding == "deflate-raw":
        c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    return brotli.compress(data, quality=5, lgwin=24)


def coding_app(bodies: dict[str, bytes], seen: list[dict]) -> Starlette:
    def reply(body: bytes, coding: str) -> Response:
        return Response(body, media_type="text/html",
                        headers={"content-encoding": coding.removesuffix("-raw")})

    async def page(request: Request):
        seen.append(dict(request.headers))
        coding = request.path_params["coding"]
        text = LARGE_PAGE if request.path_params["size"] == "large" else PAGE
        return reply(encoded(coding, text.encode()), coding)

    async def bomb(request: Request):
        coding = request.path_params["coding"]
        return reply(bodies[coding], coding)

    async def members(request: Request):  # two gzip members, one after the other
        return reply(gzip.compress(b"<p>first half, ") + gzip.compress(b"second half</p>"), "gzip")

    async def corrupt(request: Request):
        return reply(b"\x1f\x8b\x08\x00 this is no gzip at all", "gzip")

    async def unknown(request: Request):
        return reply(b"(zstd frames)", "zstd")

    async def plain(request: Request):
        return PlainTextResponse("not compressed")

    return Starlette(routes=[Route("/bomb/{coding}", bomb), Route("/members", members),
                             Route("/corrupt", corrupt), Route("/unknown", unknown), Route("/plain", plain),
                             Route("/{size:str}/{coding}", page)])


@pytest.fixture(scope="module")
def server():
    seen: list[dict] = []
    with ServerThread(coding_app(bombs(), seen)) as running:
        running.seen = seen
        yield running


CAP = 2_000_000  # FETCH_MAX_BYTES' default; more than a bomb's compressed size


def client(server, max_bytes: int = CAP) -> WebClient:
    return WebClient(user_agent="SkiplockBot/0.1 (test)", timeout=10, max_bytes=max_bytes,
                     allow_private=f"127.0.0.1:{server.port}")


CODINGS = ["gzip", "deflate", "deflate-raw", "br"]
BOMBED = ["gzip", "deflate", "br"]  # raw deflate takes deflate's path once its header is read


@pytest.mark.parametrize("coding", CODINGS)
async def test_each_coding_we_offer_is_undone(server, coding):
    server.seen.clear()
    web = client(server)
    small, large = await web.get(f"{server.url}/small/{coding}"), await web.get(f"{server.url}/large/{coding}")
    assert (small.outcome, small.text) == ("ok", PAGE)
    assert (large.outcome, len(large.text)) == ("ok", len(LARGE_PAGE)) and large.text == LARGE_PAGE
    assert server.seen[0]["accept-encoding"] == "gzip, deflate, br"


async def test_gzip_members_follow_each_other_and_a_bad_body_is_its_own_outcome(server):
    web = client(server)
    assert (await web.get(f"{server.url}/members")).text == "<p>first half, second half</p>"
    assert (await web.get(f"{server.url}/plain")).text == "not compressed"
    corrupt = await web.get(f"{server.url}/corrupt")
    assert (corrupt.outcome, corrupt.text, corrupt.note) == ("bad_encoding", None, "the body is not valid gzip")
    unknown = await web.get(f"{server.url}/unknown")
    assert unknown.outcome == "bad_encoding" and "zstd" in unknown.note


@pytest.mark.parametrize("coding", CODINGS)
async def test_a_bomb_is_cut_at_the_cap(server, coding):
    resp = await client(server).get(f"{server.url}/bomb/{coding}")
    assert (resp.outcome, resp.note) == ("too_large", f"more than {CAP} bytes")


# One fetch in a fresh interpreter; it prints the outcome and how far its resident memory
# rose above where it stood just before the fetch. Linux resets the peak (VmHWM) on a
# write of "5" to clear_refs; without that, the peak so far stands in (an overestimate).
PROBE = r"""
import asyncio, json, resource, sys

import httpx

from app.outreach.web import WebClient


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return lambda: status("VmHWM:")
    except OSError:
        return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def guarded(url, cap, port):
    return await WebClient(user_agent="probe", timeout=60, max_bytes=cap,
                           allow_private=f"127.0.0.1:{port}").get(url)


async def httpx_decoding(url, cap, port):
    # What the client did before: httpx undoes the coding a whole chunk at a time.
    body = bytearray()
    async with httpx.AsyncClient(timeout=60) as client, client.stream("GET", url) as r:
        async for chunk in r.aiter_bytes():
            body += chunk
            if len(body) > cap:
                return "too_large"
    return "ok"


async def main(how, base, coding, cap, port):
    fetch = {"guarded": guarded, "httpx": httpx_decoding}[how]
    warm = await fetch(f"{base}/small/{coding}", cap, port)  # imports, first connection
    before = status("VmRSS:")
    peak = reset_peak()
    outcome = await fetch(f"{base}/bomb/{coding}", cap, port)
    print(json.dumps({"outcome": getattr(outcome, "outcome", outcome), "growth": peak() - before,
                      "warm": getattr(warm, "outcome", warm)}))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""

@pytest.fixture(scope="module")
def probes(server) -> dict[tuple[str, str], dict]:
    """Every probe below, run side by side (each in its own process, so each measures
    only itself)."""
    runs = [("guarded", coding) for coding in BOMBED] + [("httpx", "gzip")]
    started = {run: subprocess.Popen(
        [sys.executable, "-c", PROBE, run[0], server.url, run[1], str(CAP), str(server.port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}) for run in runs}
    results = {}
    for run, proc in started.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results[run] = json.loads(out)
    return results


@pytest.mark.parametrize("coding", BOMBED)
def test_a_bomb_costs_less_than_three_caps_of_memory(probes, coding):
    got = probes["guarded", coding]
    assert got["warm"] == "ok" and got["outcome"] == "too_large"
    assert got["growth"] < 3 * CAP, f"{got['growth'] / 1e6:.1f} MB for one {coding} fetch"


def test_the_measure_sees_a_bomb_that_is_expanded_whole(probes):
    """The same probe on httpx's own decoding, which the client used before: it must show
    the blow-up, or the bound above proves nothing."""
    got = probes["httpx", "gzip"]
    assert got["outcome"] == "too_large" and got["growth"] > 10 * CAP, got
