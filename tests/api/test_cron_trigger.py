"""An external scheduler calling /cron/pipeline says it is the schedule: X-Skiplock-Trigger."""

from __future__ import annotations

from serving_kit import AUTH, assert_error


async def test_the_trigger_header_records_cron_and_nothing_else(make_client, pool, recorder):
    client = await make_client(stages=[recorder.stage])
    said = await client.post("/cron/pipeline", headers={**AUTH, "X-Skiplock-Trigger": "cron"})
    plain = await client.post("/cron/pipeline", headers=AUTH)
    assert (said.status_code, plain.status_code) == (200, 200)
    assert (said.json()["trigger"], plain.json()["trigger"]) == ("cron", "http")
    error = assert_error(await client.post("/cron/pipeline", headers={**AUTH, "X-Skiplock-Trigger": "admin"}),
                         400, "invalid_trigger")
    assert "'cron'" in error["message"]
    # without the secret the header changes nothing: 401 before it is read
    assert_error(await client.post("/cron/pipeline", headers={"X-Skiplock-Trigger": "cron"}), 401, "unauthorized")
    triggers = sorted(r["trigger"] for r in await pool.fetch("SELECT trigger FROM runs"))
    assert triggers == ["cron", "http"]
