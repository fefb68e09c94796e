"""Helpers for the serving-layer tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

import uvicorn

from app import Job, NewJob, Stage
from app.engine import jobs as q
from app.settings import Settings, load_settings
from tests.credentials import CRON_SECRET, CURSOR_SECRET
from tests.tenant_login import tenant_login_url

SECRET = CRON_SECRET
ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": f"Bearer {SECRET}"}


def make_settings(dsn: str | None, **overrides) -> Settings:
    # tenant requests on the session's tenant login, as a careful deployment serves them
    values = dict(database_url=dsn, tenant_database_url=tenant_login_url(dsn), cron_secret=SECRET, local_dev=False,
                  cursor_secret=CURSOR_SECRET)
    if "run_scheduler" in Settings.model_fields:
        values["run_scheduler"] = False  # no recurring maintenance jobs in these counts
    values.update(overrides)
    return load_settings(**values)


class Recorder:
    """A stage whose handler records the id of every job it runs."""

    def __init__(self, type_: str = "record", delay: float = 0.0, batch: int = 5,
                 concurrency: int = 5) -> None:
        self.seen: list[uuid.UUID] = []
        self.delay = delay
        self.stage = Stage(type=type_, handler=self.handle, batch=batch, concurrency=concurrency,
                           lease=60, timeout=10)

    async def handle(self, job: Job, ctx) -> None:
        self.seen.append(job.id)
        if self.delay:
            await asyncio.sleep(self.delay)


async def seed(pool, n: int, type_: str = "record") -> list[uuid.UUID]:
    return await q.enqueue_many(pool, [NewJob(type=type_, payload={"n": i}) for i in range(n)])


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def start_uvicorn(app, sock: socket.socket | None = None) -> tuple[uvicorn.Server, asyncio.Task, socket.socket]:
    """Serve `app` on `sock` (default: a free port)."""
    sock = sock or free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return server, task, sock


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


class ServedProcess:
    """`python -m app serve` on a free port of 127.0.0.1, with `env` on top of the test's."""

    def __init__(self, dsn: str, **env: str) -> None:
        sock = free_socket()
        self.port = sock.getsockname()[1]
        sock.close()
        self.base = f"http://127.0.0.1:{self.port}"
        values = {**os.environ, "DATABASE_URL": dsn, "TENANT_DATABASE_URL": tenant_login_url(dsn) or "",
                  "CRON_SECRET": CRON_SECRET, "RUN_SCHEDULER": "false", "LOG_LEVEL": "WARNING",
                  "PYTHONPATH": str(ROOT), **env}
        self.proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(self.port)], cwd=ROOT,
                                     env=values, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"skiplock serve exited: {self.proc.stderr.read().decode()}")
            try:
                if httpx.get(f"{self.base}/health/live", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("skiplock serve did not answer in time")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
