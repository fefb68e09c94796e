"""`skiplock status` and `skiplock stages ls --json` show a stage's limits across every run."""

from __future__ import annotations

from app import Stage
from app.settings import get_settings
from tests.cli.test_cli_operator import ok_json


async def send(job, ctx):
    pass


STAGES = [Stage(type="send", handler=send, batch=2, concurrency=2, global_concurrency=1, rate=(5, 2),
                limit_by="payload.account_id"),
          Stage(type="plain", handler=send)]


async def test_status_shows_a_stages_limits(cli, monkeypatch):
    monkeypatch.setenv("PIPELINE_STAGES", f"{__name__}:STAGES")
    get_settings.cache_clear()
    status = await cli("status")
    assert "limits send" in status.stdout and "limits plain" not in status.stdout
    line = next(x for x in status.stdout.splitlines() if "limits send" in x)
    assert "at most 1 held at once, 5 starts per 2s, per payload.account_id" in line
    assert ok_json(await cli("status", "--json"))["limits"] == [
        {"type": "send", "globalConcurrency": 1, "rate": {"starts": 5, "perSeconds": 2.0},
         "limitBy": "payload.account_id"}]
    listed = {s["type"]: s for s in ok_json(await cli("stages", "ls", "--json"))["data"]}
    assert listed["send"]["rate"] == {"starts": 5, "perSeconds": 2.0} and listed["plain"]["rate"] is None
