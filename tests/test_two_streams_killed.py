"""A run alone on a backlog claims on two streams; killed with kill -9 in the middle, it
loses nothing: what it held comes back when its two-second leases expire, its row is
closed as abandoned once its heartbeat is a minute old, and the next run (alone again, so
on two streams) finishes everything, each job done once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

from app.engine.jobs import NewJob, enqueue_many
from app.engine.runs import close_abandoned_runs

JOBS = 3000


async def test_a_run_killed_on_two_streams_loses_nothing(pool, dsn):
    await pool.execute("UPDATE runs SET finished_at = now() WHERE finished_at IS NULL")  # alone
    await pool.execute("DELETE FROM jobs WHERE type = 'echo'")
    await enqueue_many(pool, [NewJob(type="echo", payload={"seconds": 0.002}) for _ in range(JOBS)])
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_PLUGINS": "", "RUN_SCHEDULER": "false",
           "PIPELINE_STAGES": "tests.pooler.stages:ECHO", "PIPELINE_CLAIM_STREAMS": "2", "LOG_LEVEL": "ERROR"}
    cmd = [sys.executable, "-m", "app", "run-once", "--budget", "120"]

    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        # working on two connections: its loop's and the second stream's
        while not await pool.fetchval(
                "SELECT (SELECT count(*) FROM jobs WHERE type = 'echo' AND status = 'done') >= $1 AND "
                "(SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE application_name = '' "
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND state IS NOT NULL "
                " AND query LIKE '%Claim up to%') >= 2", JOBS // 10):
            assert time.monotonic() < deadline and first.poll() is None, first.stderr.read() if first.poll() else ""
            await asyncio.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    held = await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'echo' AND status = 'running'")
    await asyncio.sleep(2.5)  # the leases run out
    # Until its heartbeat is a minute old the killed run looks alive, and a run that is
    # not alone keeps to one stream: let the minute pass, and the row is closed.
    await pool.execute("UPDATE runs SET heartbeat_at = now() - interval '2 minutes' WHERE finished_at IS NULL")
    assert len(await close_abandoned_runs(pool)) == 1

    second = await asyncio.to_thread(subprocess.run, cmd, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    body = json.loads(second.stdout)
    assert body["stopReason"] == "no_work" and body["summary"].get("secondStreamBatches", 0) > 0, body

    rows = await pool.fetch("SELECT status, attempts, count(*) AS n FROM jobs WHERE type = 'echo' "
                            "GROUP BY 1, 2 ORDER BY 1, 2")
    assert {r["status"] for r in rows} == {"done"}
    assert sum(r["n"] for r in rows) == JOBS
    # only what the killed run held was tried twice
    assert sum(r["n"] for r in rows if r["attempts"] == 2) <= held and max(r["attempts"] for r in rows) <= 2
