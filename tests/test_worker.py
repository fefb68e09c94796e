"""The long-running worker: woken by NOTIFY, and a clean SIGTERM; `run-once` stops as
cleanly on Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from app.engine import jobs as q
from app.engine.jobs import NewJob
from app.pipeline.stage import Stage
from app.pipeline.worker import Worker
from app.settings import load_settings


async def wait_until(predicate, timeout=10.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(every)
    return False


async def idle_worker(pool) -> bool:
    """The worker is idle: its first run is open and has done its housekeeping."""
    return await wait_until(lambda: pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE trigger = 'worker') AND NOT EXISTS "
        "(SELECT 1 FROM jobs WHERE type = 'maintenance' AND status <> 'done')"))


async def test_worker_wakes_on_notify_well_before_its_poll(pool, dsn):
    done = asyncio.Event()

    async def handle(job, ctx):
        done.set()

    settings = load_settings(database_url=dsn, worker_poll_seconds=30, worker_grace_seconds=1)
    worker = Worker(pool, dsn, [Stage(type="t", handler=handle)], settings)
    task = asyncio.create_task(worker.run())
    try:
        assert await idle_worker(pool)
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await q.enqueue(pool, NewJob(type="t"))
        await asyncio.wait_for(done.wait(), 20)
        # woken by the NOTIFY, not by its 30 s poll (with room for a loaded box)
        assert time.monotonic() - started < 10
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    row = await pool.fetchrow("SELECT * FROM runs WHERE trigger = 'worker'")
    assert row["finished_at"] is not None and row["jobs_done"] == 1


async def test_a_retried_job_wakes_the_worker_well_before_its_poll(pool, dsn):
    attempts = []

    async def fail_once(job, ctx):
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise RuntimeError("not yet")

    [job_id] = await pool.fetchval(
        "WITH j AS (INSERT INTO jobs (type, status, attempts, last_error, finished_at) "
        "VALUES ('t', 'failed', 3, 'gave up', now()) RETURNING id) SELECT array_agg(id) FROM j")
    settings = load_settings(database_url=dsn, worker_poll_seconds=30, worker_grace_seconds=1)
    worker = Worker(pool, dsn, [Stage(type="t", handler=fail_once, max_attempts=1)], settings)
    task = asyncio.create_task(worker.run())
    try:
        assert await idle_worker(pool)
        await asyncio.sleep(0.2)
        started = time.monotonic()
        # a retry in plain SQL, as an operator in psql would (the API and the CLI do the same)
        await pool.execute("UPDATE jobs SET status = 'pending', attempts = 0, run_after = now(), "
                           "finished_at = NULL WHERE id = $1", job_id)
        assert await wait_until(lambda: pool.fetchval("SELECT status <> 'pending' FROM jobs WHERE id = $1", job_id), 20)
        assert attempts and attempts[0] - started < 10  # woken, not polled after 30 s
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("command, sig, trigger", [("worker", signal.SIGTERM, "worker"),
                                                  ("run-once", signal.SIGINT, "manual")])
async def test_a_signal_mid_batch_defers_in_flight_work_and_exits_zero(pool, dsn, command, sig, trigger):
    """SIGTERM to a worker, Ctrl-C to a run-once: no new claims, the jobs in flight handed
    back after the grace with no attempt spent, the runs row written. (A run-once used to
    die on Ctrl-C: its row open, its jobs running until their lease ran out, an attempt
    gone each time.)"""
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_STAGES": "tests.slow_stages:STAGES",
           "WORKER_GRACE_SECONDS": "0.5", "WORKER_POLL_SECONDS": "0.2"}
    ids = await q.enqueue_many(pool, [NewJob(type="slow", payload={"seconds": 30}) for _ in range(6)])
    proc = subprocess.Popen([sys.executable, "-m", "app", command], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # a batch of 4 in flight, and the other 2 claimed while it runs (the stages ahead are empty)
        assert await wait_until(lambda: pool.fetchval(
            "SELECT count(*) = 6 FROM jobs WHERE type = 'slow' AND status = 'running'"), timeout=20)
        started = time.monotonic()
        proc.send_signal(sig)
        code = await asyncio.to_thread(proc.wait, 15)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate()
    assert code == 0, err
    assert time.monotonic() - started < 5
    rows = await pool.fetch("SELECT status, attempts FROM jobs WHERE id = ANY($1)", ids)
    assert {r["status"] for r in rows} == {"pending"}  # none left running, none failed
    assert {r["attempts"] for r in rows} == {0}        # deferred work burns no attempt
    run = await pool.fetchrow("SELECT * FROM runs WHERE trigger = $1 ORDER BY started_at DESC LIMIT 1", trigger)
    assert run["finished_at"] is not None and run["jobs_deferred"] == 6 and run["jobs_failed"] == 0
