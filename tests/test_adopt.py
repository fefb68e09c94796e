"""docs/adopt.md's two ways to bring Skiplock to an app that already has FastAPI and
PostgreSQL, as written there, from a folder outside the repository: mounted into the
team's own app, and as a service of its own beside it on the same database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx

from tests.factories import api_key

CRON = "c" * 40
DOC = Path(__file__).resolve().parent.parent / "docs" / "adopt.md"


def snippet(name: str) -> str:
    """The python block of docs/adopt.md that starts with `# <name>`."""
    text = DOC.read_text()
    start = text.index(f"```python\n# {name}\n") + len("```python\n")
    return text[start:text.index("\n```", start)] + "\n"


def team_folder(tmp_path: Path) -> Path:
    (tmp_path / "mystages.py").write_text(snippet("mystages.py"))
    (tmp_path / "teamapp.py").write_text(snippet("teamapp.py"))
    return tmp_path


async def test_mounted_into_the_teams_own_app(dsn, pool, tmp_path, monkeypatch):
    folder = team_folder(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    for name, value in {"DATABASE_URL": dsn, "PIPELINE_PLUGINS": "", "PIPELINE_STAGES": "mystages:STAGES",
                        "CRON_SECRET": CRON}.items():
        monkeypatch.setenv(name, value)
    from app.settings import get_settings
    get_settings.cache_clear()
    import teamapp  # the team's module, as docs/adopt.md writes it

    admin = await api_key(pool, "ops@example.com", admin=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=teamapp.api), base_url="http://t") as client:
        assert (await client.get("/hello")).json() == {"hello": "team"}        # the team's own route
        made = await client.post("/queue/jobs", json={"type": "welcome", "payload": {"to": "ann@example.com"}},
                                 headers={"Authorization": f"Bearer {admin}"})
        assert made.status_code == 201, made.text
        ran = await client.post("/queue/cron/pipeline", headers={"Authorization": f"Bearer {CRON}"})
        assert ran.status_code == 200, ran.text
        assert ran.json()["jobsDone"] == 1 and ran.json()["summary"]["counts"]["welcomes_sent"] == 1
    await teamapp.skiplock.state.runtime.close()
    get_settings.cache_clear()


async def test_a_service_of_its_own_on_the_same_database(dsn, pool, tmp_path):
    folder = team_folder(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DATABASE_URL=dsn, PIPELINE_PLUGINS="", PIPELINE_STAGES="mystages:STAGES", CRON_SECRET=CRON)
    # the team's code enqueues in its own transaction (here a plain script of the team's)
    enqueue = textwrap.dedent(snippet("enqueue_from_the_team.py"))
    made = subprocess.run([sys.executable, "-c", enqueue], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    # Skiplock's own process runs it (a worker; run-once here, so the test ends by itself)
    script = os.path.join(os.path.dirname(sys.executable), "skiplock")
    ran = subprocess.run([script, "run-once"], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["summary"]["counts"]["welcomes_sent"] == 1
    assert await pool.fetchval("SELECT status FROM jobs WHERE type = 'welcome'") == "done"
