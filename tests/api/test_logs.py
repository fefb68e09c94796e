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


# Every spelling the red team got through (a full admin key reached the access log from
# GET /events/ws?authorization=slk_...), and the seven that were redacted already.
SPELLINGS = ["authorization", "auth", "bearer", "api-key", "x-api-key", "auth_token", "client_secret", "ke%79",
             "Authorization", "X-API-KEY", "key", "api_key", "apikey", "token", "access_token", "secret", "password"]


async def test_no_spelling_of_a_credential_reaches_a_log_line(json_logs, dsn, admin_key):
    """By name (each spelling above, percent-encoded too), by value (an API key anywhere, the
    cron secret and METRICS_TOKEN, plain or percent-encoded), in uvicorn's access log, a
    WebSocket's request line, a message's args and a traceback."""
    from urllib.parse import quote

    import httpx
    from serving_kit import start_uvicorn
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from app.api import create_app
    from tests.credentials import CRON_SECRET, METRICS_TOKEN

    app = create_app(make_settings(dsn, metrics_token=METRICS_TOKEN))
    server, task, sock = await start_uvicorn(app)
    host = "127.0.0.1:%d" % sock.getsockname()[1]
    by_name = {name: f"opaque-{i}-credential-7f3a9c2e" for i, name in enumerate(SPELLINGS)}
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}") as client:
            for name, value in by_name.items():
                await client.get(f"/events/ws?room=system&{name}={value}")
                await client.get(f"/jobs?limit=1&{name}={admin_key}")
            for value in (admin_key, quote(admin_key, safe=""), CRON_SECRET, METRICS_TOKEN, quote(CRON_SECRET, safe="")):
                await client.get(f"/health/live?q={value}")
            await client.get(f"/jobs/{admin_key}")
        try:  # the red team's own request: a WebSocket with the key in ?authorization=
            async with connect(f"ws://{host}/events/ws?room=system&authorization={admin_key}") as ws:
                await ws.recv()
        except InvalidStatus:
            pass
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
    log = logging.getLogger("skiplock.test")
    log.warning("calling with %s", {"authorization": f"Bearer {admin_key}", "x-api-key": by_name["x-api-key"]})
    try:
        raise RuntimeError(f"GET /metrics?token={METRICS_TOKEN} failed with {CRON_SECRET}")
    except RuntimeError:
        log.exception("it broke at %s", f"postgresql://owner:{by_name['password']}@db/app")
    logged = json.dumps(json_logs())
    assert logged.count("[redacted]") >= 2 * len(SPELLINGS) + 10
    secret_part = admin_key.split("_", 2)[2]
    for value in [secret_part, quote(secret_part, safe=""), CRON_SECRET, METRICS_TOKEN, *by_name.values()]:
        assert value not in logged, value
    assert "slk_" + admin_key.split("_")[1] in logged  # the key's public prefix still names it


def test_uvicorns_own_access_formatter_gets_redacted_args():
    """Served by plain `uvicorn` (its own LOGGING_CONFIG), the access record's args stay a
    tuple its formatter unpacks, each already redacted."""
    from uvicorn.logging import AccessFormatter

    from app.logs import install_redaction

    install_redaction()
    record = logging.getLogger("uvicorn.access").makeRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/events/ws?x-api-key=opaque-credential-123", "1.1", 404), None)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False).format(record)
    assert line == '127.0.0.1:5000 - "GET /events/ws?x-api-key=[redacted] HTTP/1.1" 404 Not Found'
