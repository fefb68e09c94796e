"""GET /stages shows each stage's limits across every run: global_concurrency, rate and the
key they hold per (limit_by), null where a stage has none."""

from __future__ import annotations

from app import Stage


async def send(job, ctx):
    pass


async def test_get_stages_shows_the_limits(make_client):
    client = await make_client(stages=[
        Stage(type="send", handler=send, batch=1, rate=(10, 60), limit_by="lane"),
        Stage(type="plain", handler=send)])
    listed = {s["type"]: s for s in (await client.get("/stages")).json()["data"]}
    assert (listed["send"]["globalConcurrency"], listed["send"]["rate"], listed["send"]["limitBy"]) == (
        None, {"starts": 10, "perSeconds": 60.0}, "lane")
    assert (listed["plain"]["globalConcurrency"], listed["plain"]["rate"], listed["plain"]["limitBy"]) == (
        None, None, None)
