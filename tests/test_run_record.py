"""Every invocation leaves its runs row, whatever the database does: PostgreSQL restarted
(`pg_ctl restart -m fast`) under three overlapping `run-once` invocations; and a run or a
worker started while it is stopped waits for it. These tests start a PostgreSQL of their
own, so the session's server is not disturbed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from app.engine.db import connect
from app.engine.jobs import NewJob, enqueue_many
from app.lambda_handler import LambdaApp
from app.runtime import Runtime
from app.settings import load_settings
from app.pipeline.stage import Stage
from tests.lambda_context import LambdaContext
from tests.own_server import migrated_server, pg_ctl
from tests.pooler.stages import echo

JOBS = 900


@pytest.fixture
async def own_server():
    async with migrated_server("skiplock-restart-", []) as (server, dsn, _):  # the queue's chain: no plug-in
        yield server, dsn


async def test_a_restart_under_three_runs_leaves_every_row_closed_and_truthful(own_server):
    server, dsn = own_server
    db = await connect(dsn)  # jsonb as JSON
    try:
        await enqueue_many(db, [NewJob(type="echo", payload={"seconds": 0.01}) for _ in range(JOBS)])
        env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_PLUGINS": "", "RUN_SCHEDULER": "false",
               "PIPELINE_STAGES": "tests.pooler.stages:ECHO", "LOG_LEVEL": "ERROR"}
        procs = [subprocess.Popen([sys.executable, "-m", "app", "run-once", "--budget", "120"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
        try:
            deadline = time.monotonic() + 90
            while not await db.fetchval(  # all three are running, and working
                    "SELECT (SELECT count(*) FROM runs) = 3 AND "
                    "(SELECT count(*) FROM jobs WHERE status = 'done') >= $1", JOBS // 20):
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
                await asyncio.sleep(0.05)
            await db.close()
            await asyncio.to_thread(pg_ctl, server, "-m", "fast", "restart")  # every connection is cut, mid-batch
            outs = [await asyncio.to_thread(p.communicate, timeout=120) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        db = await connect(dsn)
        # each invocation wrote its own row, and said how it ended: exit 1 and `error` naming
        # the lost connection if the restart cut it, else 0 and done
        for p, (out, err) in zip(procs, outs):
            assert out, (p.returncode, err[-2000:])
            body = json.loads(out)
            row = await db.fetchrow("SELECT * FROM runs WHERE id = $1::uuid", body["id"])
            assert row["finished_at"] is not None and row["stop_reason"] == body["stopReason"]
            if p.returncode == 1:  # said as what it is, in one line, no traceback
                assert body["stopReason"] == "error", body
                assert body["error"].startswith("the database connection was lost: "), body
                assert "released back to the pool" not in body["error"] and "Traceback" not in err, (body, err)
                assert err.strip().splitlines()[-1].startswith(f"error: run {body['id']} stopped on an error:")
            else:
                assert p.returncode == 0 and body["stopReason"] == "no_work", (p.returncode, body, err)
        assert [p.returncode for p in procs].count(1) >= 1  # the restart did cut somebody
        # what the cut runs held comes back (their leases, aged here instead of waited for)
        await db.execute("UPDATE jobs SET locked_at = now() - interval '1 hour' WHERE status = 'running'")
        wide = [Stage(type="echo", handler=echo, batch=100, concurrency=100, lease=2, timeout=1)]  # quicker
        runtime = Runtime(load_settings(database_url=dsn, run_scheduler=False, pipeline_plugins=""), wide)
        try:
            last = await runtime.run("manual", 60)
        finally:
            await runtime.close()
        assert last.stop_reason == "no_work"
        rows = await db.fetch("SELECT status, attempts FROM jobs WHERE type = 'echo'")
        assert {r["status"] for r in rows} == {"done"} and len(rows) == JOBS
        assert max(r["attempts"] for r in rows) <= 2
        assert await db.fetchval("SELECT count(*) FROM runs WHERE finished_at IS NULL") == 0
        # counted once each: a batch whose completion committed as the connection broke is
        # the only thing a run may fail to count (at most one batch of ten per cut run)
        counted = await db.fetchval("SELECT sum(jobs_done) FROM runs")
        assert JOBS - 3 * 10 <= counted <= JOBS
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def started_while_down(server, dsn, *command: str):
    """20 echo jobs, the server stopped, then `python -m app <command>` started; yields the
    process after two seconds, still waiting, with the server started again; kills it if
    the test leaves it running."""
    db = await connect(dsn)
    await enqueue_many(db, [NewJob(type="echo", payload={}) for _ in range(20)])
    await db.close()
    await asyncio.to_thread(pg_ctl, server, "-m", "fast", "stop")
    env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_PLUGINS": "", "RUN_SCHEDULER": "false",
           "PIPELINE_STAGES": "tests.pooler.stages:ECHO", "LOG_LEVEL": "ERROR", "WORKER_POLL_SECONDS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "app", *command], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(2)
        assert proc.poll() is None, proc.communicate()  # still waiting, not gone
        await asyncio.to_thread(pg_ctl, server, "restart")  # with the options it was started with
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_run_started_while_the_database_is_down_waits_for_it(own_server):
    """`run-once` started while PostgreSQL is stopped: it waits for the server (as its runs
    row would) and, once the server is back two seconds later, does its work and writes its
    row, instead of ending with none."""
    server, dsn = own_server
    async with started_while_down(server, dsn, "run-once", "--budget", "20") as proc:
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, err[-2000:]
    body = json.loads(out)
    assert body["stopReason"] == "no_work" and body["jobsDone"] == 20
    db = await connect(dsn)
    try:
        assert await db.fetchval("SELECT count(*) FROM runs WHERE finished_at IS NOT NULL") == 1
    finally:
        await db.close()


async def test_a_scheduled_run_that_waited_for_the_database_keeps_to_lambdas_time_left(own_server):
    """Lambda's clock runs while the schedule's run waits for PostgreSQL: the run took its
    budget from the time left before the wait and kept all of it after, so with the server
    back late it ran past the time left and Lambda killed it before its row was written."""
    server, dsn = own_server
    await asyncio.to_thread(pg_ctl, server, "-m", "fast", "stop")
    lam = LambdaApp(load_settings(database_url=dsn, run_scheduler=False, lambda_safety_margin_seconds=15),
                    [Stage(type="echo", handler=echo)])
    try:
        tick = asyncio.create_task(asyncio.to_thread(
            lam, {"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext(40)))
        await asyncio.sleep(3)
        await asyncio.to_thread(pg_ctl, server, "restart")
        body = await tick
    finally:
        await asyncio.to_thread(lam.loop.run_until_complete, lam.runtime.close())
        lam.loop.close()
    assert body["stopReason"] == "no_work", body
    assert body["budgetSeconds"] <= 40 - 15 - 3  # the time left, less the margin, less the wait


async def test_a_worker_started_while_the_database_is_down_waits_for_it(own_server):
    """`worker` started while PostgreSQL is stopped: it waits for the server, as a run does,
    and once the server is back drains the jobs and stops on SIGTERM with status 0, instead
    of ending at its first connection (the chaos run found a worker gone this way)."""
    server, dsn = own_server
    async with started_while_down(server, dsn, "worker") as proc:
        db = await connect(dsn)
        try:
            deadline = time.monotonic() + 60
            while await db.fetchval("SELECT count(*) FROM jobs WHERE status = 'done'") < 20:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                await asyncio.sleep(0.2)
        finally:
            await db.close()
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, err[-2000:]


async def test_the_stop_reasons_are_the_ones_the_database_accepts(pool):
    import re

    from app.engine.runs import STOP_REASONS
    check = await pool.fetchval(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c "
        "WHERE c.conrelid = 'runs'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%stop_reason%'")
    assert set(re.findall(r"'(\w+)'::text", check)) == set(STOP_REASONS), check
