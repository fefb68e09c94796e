"""`make run`, as a person runs it: start it, use the printed curl, stop it with Ctrl-C
(SIGINT to the whole process group, as a terminal sends it), and no PostgreSQL is left
running. And after a crash (SIGKILL), the next start takes over the orphaned server."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import asyncpg
import httpx
import pytest
from serving_kit import free_socket

from app.devdb import LocalPostgres
from app.engine.db import create_pool
from app.runtime import in_schema
from tests import factories

ROOT = Path(__file__).resolve().parents[2]


def processes_using(path: Path) -> list[int]:
    """Pids whose command line names `path` (the postgres server and its children)."""
    needle = str(path).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


class MakeRun:
    def __init__(self, data_dir: Path, port: int, tick: float = 0.5) -> None:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "CRON_SECRET", "LOCAL_DEV", "MAKEFLAGS", "MFLAGS")}
        env.update(LOCAL_DATA_DIR=str(data_dir), LOCAL_PORT=str(port), LOCAL_TICK_SECONDS=str(tick),
                   PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(["make", "-s", "run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r}; output so far:\n" + "\n".join(self.seen))

    def app_pid(self, data_dir: Path) -> int:
        return int((data_dir / "dev.pid").read_text())

    def ctrl_c(self, timeout: float = 30) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def wait_gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def data_dir():
    # Not under pytest's tmp_path: as root the server's user must traverse every parent.
    folder = Path(tempfile.mkdtemp(prefix="skiplock-make-run-"))
    yield folder
    for pid in processes_using(folder):  # never leave a server behind, even on failure
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


async def tenant_key_in(data_dir: Path) -> str:
    """A tenant's API key, made straight in `make run`'s database."""
    pool = await create_pool(_local_dsn(data_dir), size=1)
    try:
        return await factories.api_key(pool, "tenant@make-run.example")
    finally:
        await pool.close()


async def logins_connected(data_dir: Path) -> set[str]:
    conn = await asyncpg.connect(_local_dsn(data_dir))
    try:
        return {r["usename"] for r in await conn.fetch(
            "SELECT usename FROM pg_stat_activity WHERE datname = 'skiplock' AND pid <> pg_backend_pid()")}
    finally:
        await conn.close()


def _local_dsn(data_dir: Path) -> str:
    """The embedded database's URL, in the queue's schema (as `make run`'s own)."""
    server = LocalPostgres(data_dir)
    return in_schema(server.dsn(server.running_port(), "skiplock"), "skiplock")


def run_the_printed_curl(command: str) -> dict:
    if shutil.which("curl"):
        out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout)
    secret = re.search(r"Bearer ([^']+)'", command).group(1)
    url = command.split()[-1]
    return httpx.post(url, headers={"Authorization": f"Bearer {secret}"}, timeout=60).json()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_serves_triggers_ticks_and_stops_clean(data_dir):
    with free_socket() as sock:
        port = sock.getsockname()[1]
    run = MakeRun(data_dir, port)
    try:
        # the first start makes a cluster (initdb) and imports everything: slow on a busy box
        # it says it serves only once it does: the banner comes after uvicorn listens
        run.wait_for(r"Uvicorn running on", timeout=150)
        curl = run.wait_for(r"^\s+(curl -s -X POST .*/cron/pipeline)$").group(1)
        admin_key = run.wait_for(r"Admin API key .*: (slk_\S+)$").group(1)
        assert f"http://127.0.0.1:{port}/cron/pipeline" in curl
        jobs = httpx.get(f"http://127.0.0.1:{port}/jobs", headers={"Authorization": f"Bearer {admin_key}"})
        assert jobs.status_code == 200 and "data" in jobs.json()
        assert httpx.get(f"http://127.0.0.1:{port}/jobs").status_code == 401
        # a tenant's request is served by the tenant login, not the tables' owner
        tenant_key = asyncio.run(tenant_key_in(data_dir))
        mine = httpx.get(f"http://127.0.0.1:{port}/jobs", headers={"Authorization": f"Bearer {tenant_key}"})
        assert mine.status_code == 200 and mine.json()["data"] == []
        assert asyncio.run(logins_connected(data_dir)) >= {"postgres", "skiplock_tenant"}
        assert processes_using(data_dir), "no embedded PostgreSQL under the data folder"

        summary = run_the_printed_curl(curl)
        assert summary["trigger"] == "http"
        assert summary["stopReason"] in ("no_work", "time_budget")
        assert {"id", "jobsDone", "jobsFailed", "jobsDeferred", "quotaUnits", "summary"} <= set(summary)

        run.wait_for(r'"event": "run".*"trigger": "cron"', timeout=20)  # the local ticker
        assert httpx.get(f"http://127.0.0.1:{port}/health/ready").status_code == 200

        app_pid = run.app_pid(data_dir)
        assert run.ctrl_c() is not None
        assert wait_gone(app_pid)
        assert processes_using(data_dir) == [], "a PostgreSQL was left running"
        assert not (data_dir / "dev.pid").exists()
    finally:
        run.kill()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_after_a_crash_the_next_make_run_takes_over_the_orphaned_server(data_dir):
    with free_socket() as sock:
        port = sock.getsockname()[1]
    first = MakeRun(data_dir, port, tick=0)
    try:
        first.wait_for(r"Uvicorn running on")
        secret = first.wait_for(r"Cron secret:\s+(\S+)").group(1)
        app_pid = first.app_pid(data_dir)
        os.kill(app_pid, signal.SIGKILL)  # the app dies; its PostgreSQL does not
        assert wait_gone(app_pid)
        orphans = processes_using(data_dir)
        assert orphans
    finally:
        first.kill()

    second = MakeRun(data_dir, port, tick=0)
    try:
        second.wait_for(r"reusing the PostgreSQL left running")
        second.wait_for(r"Uvicorn running on")
        assert second.wait_for(r"Cron secret:\s+(\S+)").group(1) == secret  # kept in the data folder
        r = httpx.post(f"http://127.0.0.1:{port}/cron/pipeline",
                       headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        assert r.status_code == 200, r.text
        app_pid = second.app_pid(data_dir)
        os.kill(app_pid, signal.SIGTERM)  # a plain SIGTERM stops it cleanly too
        assert wait_gone(app_pid)
        deadline = time.monotonic() + 10
        while processes_using(data_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_using(data_dir) == [], "a PostgreSQL was left running"
    finally:
        second.kill()
