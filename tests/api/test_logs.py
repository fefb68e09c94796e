"""JSON log lines: the pipeline's run and batch records become fields of the line."""

from __future__ import annotations

import io
import json
import logging

import pytest
from serving_kit import make_settings, seed

from app.runtime import Runtime
from app.logs import configure_logging


@pytest.fixture
def json_logs():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging("INFO", stream)

    def lines() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    yield lines
    root.handlers[:], level = saved
    root.setLevel(level)


async def test_a_run_logs_json_lines_with_its_fields(json_logs, dsn, pool, recorder):
    await seed(pool, 12)
    runtime = Runtime(make_settings(dsn), [recorder.stage])
    try:
        result = await runtime.run("http")
    finally:
        await runtime.close()
    lines = [line for line in json_logs() if line["logger"] == "skiplock.pipeline"]
    batches = [line for line in lines if line.get("event") == "batch"]
    runs = [line for line in lines if line.get("event") == "run"]
    assert len(runs) == 1
    assert runs[0]["runId"] == str(result.run_id)
    assert runs[0]["stopReason"] == "no_work" and runs[0]["jobsDone"] == result.jobs_done
    record = [b for b in batches if b["stage"] == "record"]
    assert sum(b["done"] for b in record) == 12
    assert len(record) <= 3  # one line per batch of 5, not one per job
    assert all(line["level"] == "info" and line["ts"] for line in lines)


def test_plain_messages_and_exceptions_are_json_too(json_logs):
    log = logging.getLogger("skiplock.test")
    log.warning("plain %s", "text")
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("it broke")
    first, second = json_logs()[-2:]
    assert first["message"] == "plain text" and first["level"] == "warning"
    assert second["message"] == "it broke" and "ValueError: bad" in second["exc"]


async def test_a_key_put_in_a_url_is_refused_and_never_logged(json_logs, dsn, admin_key):
    """`?key=` is refused (400, 4400), but uvicorn logs the request line first: the key's
    value stays out of the log."""
    from serving_kit import start_uvicorn
    from websockets.asyncio.client import connect

    import httpx
    from app.api import create_app

    app = create_app(make_settings(dsn))
    server, task, sock = await start_uvicorn(app)
    host = "127.0.0.1:%d" % sock.getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}") as client:
            assert (await client.get(f"/jobs?limit=1&key={admin_key}")).status_code in (400, 401)
        async with connect(f"ws://{host}/events/ws?room=system&key={admin_key}") as ws:
            assert json.loads(await ws.recv())["error"]["code"] == "unknown_parameter"
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
    logged = json.dumps(json_logs())
    assert "key=[redacted]" in logged  # the request lines were logged...
    assert admin_key not in logged and admin_key.split("_", 2)[2] not in logged  # ...without it (its secret may hold "_")
