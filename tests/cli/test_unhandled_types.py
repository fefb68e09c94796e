"""A job whose type no loaded stage handles (a typo in a plain INSERT, a plug-in left out)
would wait for ever, unremarked: /metrics, `skiplock status` and the dashboard name it."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.api.main import create_app
from app.settings import load_settings
from tests.sample_stages import STAGES

TOKEN = "t" * 40


async def test_a_type_no_stage_handles_is_named_everywhere(dsn, pool, admin_key, cli):
    await pool.execute("INSERT INTO jobs (type) SELECT 'ehco' FROM generate_series(1, 3)")
    await pool.execute("INSERT INTO jobs (type) VALUES ('echo')")  # handled: not named
    settings = load_settings(database_url=dsn, pipeline_plugins="", metrics_token=TOKEN)
    app = create_app(settings, STAGES, plugins=[])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        scraped = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert scraped.status_code == 200, scraped.text
        stray = {s.labels["type"]: s.value for f in text_string_to_metric_families(scraped.text)
                 if f.name == "skiplock_unhandled_jobs" for s in f.samples}
        assert stray == {"ehco": 3}
        stats = await client.get("/stats", headers={"Authorization": f"Bearer {admin_key}"})
        assert stats.json()["unhandled"] == [{"type": "ehco", "pending": 3}]

    status = await cli("status")
    assert status.returncode == 0, status.stderr
    assert "waiting for a stage that is not loaded here" in status.stdout and "ehco" in status.stdout
    assert "echo " not in status.stdout.split("not loaded here")[1].split("last runs")[0]
