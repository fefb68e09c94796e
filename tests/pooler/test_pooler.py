"""Behind a transaction pooler: a real PgBouncer (pool_mode = transaction, two server
connections) in front of the test server. DATABASE_URL is the pooler's and
DATABASE_DIRECT_URL the server's, as a deployment sets them: nothing else changes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from app.api import create_app
from app.engine import jobs as q
from app.engine.db import connect, create_pool
from app.engine.jobs import NewJob
from app.engine.migrate import chain, migrate
from app.pipeline.stage import Stage
from app.pipeline.worker import Worker
from app.runtime import Runtime
from app.settings import load_settings
from tests import factories as f
from tests.credentials import CRON_SECRET as SECRET
from tests.pooler.stages import BOTH


def pooled_settings(pooled_dsn: str, direct_dsn: str, **overrides):
    return load_settings(**{"database_url": pooled_dsn, "database_direct_url": direct_dsn,
                            "cron_secret": SECRET, "run_scheduler": False, "pipeline_plugins": "",
                            **overrides})


def run_once(pooled_dsn: str, direct_dsn: str, stages: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": pooled_dsn, "DATABASE_DIRECT_URL": direct_dsn,
           "PIPELINE_PLUGINS": "", "PIPELINE_STAGES": f"tests.pooler.stages:{stages}",
           "RUN_SCHEDULER": "false", "LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "app", "run-once", "--budget", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def test_the_default_pool_cannot_start_behind_pgbouncer_and_the_pooled_one_can(pool, pooled_dsn):
    # what DATABASE_DIRECT_URL switches off: the startup parameter PgBouncer refuses
    with pytest.raises(asyncpg.ProtocolViolationError, match="unsupported startup parameter"):
        await create_pool(pooled_dsn)
    pool = await create_pool(pooled_dsn, 4, pooled=True)
    try:  # named prepared statements are off: two hundred statements over two server sessions
        got = await asyncio.gather(*(pool.fetchval("SELECT $1::jsonb", {"n": i}) for i in range(200)))
        assert got == [{"n": i} for i in range(200)]
    finally:
        await pool.close()


async def test_overlapping_run_once_through_the_pooler_and_a_kill_9(pool, dsn, pooled_dsn):
    echo = await q.enqueue_many(pool, [NewJob(type="echo") for _ in range(150)])
    held = await q.enqueue_many(pool, [NewJob(type="hold") for _ in range(2)])
    victim = run_once(pooled_dsn, dsn, "HOLD")
    runners = [run_once(pooled_dsn, dsn, "ECHO") for _ in range(3)]
    try:
        await wait_for(lambda: pool.fetchval(
            "SELECT count(*) = 2 FROM jobs WHERE type = 'hold' AND status = 'running'"))
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        outs = [r.communicate(timeout=120) for r in runners]
    finally:
        for proc in (victim, *runners):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [r.returncode for r in runners] == [0, 0, 0], outs
    # every echo job once: done, at its first attempt, counted by exactly one run
    rows = await pool.fetch("SELECT status, attempts FROM jobs WHERE id = ANY($1::uuid[])", echo)
    assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}
    counted = await pool.fetchval(
        "SELECT sum(jobs_done) FROM runs WHERE finished_at IS NOT NULL AND stop_reason = 'no_work'")
    assert counted == 150
    # the killed run: its row is open; a minute of silence later, the next run closes it
    # (the minute is simulated by ageing its heartbeat) and finishes what it held
    killed = await pool.fetchval("SELECT id FROM runs WHERE finished_at IS NULL")
    await pool.execute("UPDATE runs SET heartbeat_at = now() - interval '2 minutes' WHERE id = $1", killed)
    await pool.execute("UPDATE jobs SET locked_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])", held)
    runtime = Runtime(pooled_settings(pooled_dsn, dsn), BOTH)
    try:
        result = await runtime.run("manual", 30)
    finally:
        await runtime.close()
    assert result.stop_reason == "no_work" and result.jobs_done == 2
    row = await pool.fetchrow("SELECT stop_reason, error, finished_at FROM runs WHERE id = $1", killed)
    assert row["stop_reason"] == "error" and row["finished_at"] and row["error"].startswith("abandoned")
    rows = await pool.fetch("SELECT status, attempts FROM jobs WHERE id = ANY($1::uuid[])", held)
    assert {(r["status"], r["attempts"]) for r in rows} == {("done", 2)}


async def _tenant(pool, email: str) -> tuple[dict, set[str]]:
    t = await f.tenant(pool, email)
    ids = await q.enqueue_many(pool, [NewJob(type="echo", lane=t.lane) for _ in range(3)])
    return t.headers, {str(i) for i in ids}


@pytest.mark.parametrize("login", ["owner", "tenant"])
async def test_two_tenants_sharing_server_sessions_see_only_their_own(pool, dsn, pooled_dsn, pooled_tenant_dsn,
                                                                       login):
    """Row-level security reads settings that are transaction-local: with two server
    sessions under many interleaved requests of two tenants, each answer holds only its
    tenant's rows, and the sessions carry no role or key once a transaction ends. The
    same with the tenants on their own login (TENANT_DATABASE_URL) through the pooler."""
    if login == "tenant" and pooled_tenant_dsn is None:
        pytest.skip("this server's test role may not create roles")
    (alice, alice_jobs), (bob, bob_jobs) = await _tenant(pool, "alice@a.example"), await _tenant(pool, "bob@b.example")
    app = create_app(pooled_settings(pooled_dsn, dsn, tenant_database_url=pooled_tenant_dsn if login == "tenant"
                                     else None), stages=BOTH)
    raw = await create_pool(pooled_dsn, 4, pooled=True)  # plain sessions, beside the tenants'
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            async def list_jobs(headers, mine, theirs):
                r = await client.get("/jobs?limit=50", headers=headers)
                assert r.status_code == 200, r.text
                assert {j["id"] for j in r.json()["data"]} == mine
                other = await client.get(f"/jobs/{next(iter(theirs))}", headers=headers)
                assert other.status_code == 404

            async def bare_session():
                row = await raw.fetchrow("SELECT current_user AS who, current_setting('role') AS role, "
                                         "coalesce(current_setting('app.current_key_prefix', true), '') AS key")
                return tuple(row)

            calls = []
            for _ in range(15):
                calls += [list_jobs(alice, alice_jobs, bob_jobs), list_jobs(bob, bob_jobs, alice_jobs),
                          bare_session()]
            results = await asyncio.gather(*calls)
        # the same two server sessions served both tenants' transactions and these
        sessions = {r for r in results if r is not None}
        assert sessions == {("postgres", "none", "")}
        if login == "tenant":  # the pooler holds the tenant login's server sessions
            tenant_user = urlsplit(pooled_tenant_dsn).username
            assert await pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", tenant_user) >= 1
    finally:
        await raw.close()
        await app.state.runtime.close()


async def test_a_tenant_statement_timeout_stays_in_its_transaction_behind_the_pooler(pool, dsn, pooled_dsn):
    """TENANT_STATEMENT_TIMEOUT_SECONDS is set transaction-locally: through the pooler, a
    tenant's request held on a row lock is cut at the limit (503 statement_timeout), and
    plain clients sharing the two server sessions with many limited tenant transactions
    (a run, say) never find the limit on theirs."""
    alice, alice_jobs = await _tenant(pool, "alice@a.example")
    job = next(iter(alice_jobs))
    app = create_app(pooled_settings(pooled_dsn, dsn, tenant_statement_timeout_seconds=0.2), stages=BOTH)
    raw = await create_pool(pooled_dsn, 4, pooled=True)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            async with pool.acquire() as holder, holder.transaction():  # straight to the server
                await holder.execute("SELECT 1 FROM jobs WHERE id = $1::uuid FOR UPDATE", job)
                cut = await asyncio.wait_for(client.post(f"/jobs/{job}/cancel", headers=alice), 10)
            assert cut.status_code == 503 and cut.json()["error"]["code"] == "statement_timeout", cut.text

            async def tenant_read():
                r = await client.get("/jobs", headers=alice)
                assert r.status_code == 200, r.text

            async def plain_session():
                return await raw.fetchval("SHOW statement_timeout")

            calls = []
            for _ in range(15):
                calls += [tenant_read(), plain_session()]
            seen = {r for r in await asyncio.gather(*calls) if r is not None}
            assert seen == {"0"}
            cancelled = await client.post(f"/jobs/{job}/cancel", headers=alice)
            assert cancelled.status_code == 200, cancelled.text
    finally:
        await raw.close()
        await app.state.runtime.close()


async def test_migrations_go_direct_and_are_safe_behind_the_pooler_too(pg_server, pgbouncer):
    """`python -m app migrate` uses DATABASE_DIRECT_URL; a migrate through the pooler at the
    same moment is safe as well (its lock is transaction-scoped), and the app then serves
    through the pooler."""
    name = f"skiplock_pooler_{os.getpid()}"
    admin = await asyncpg.connect(pg_server)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{name}"')
    # behind a pooler the URL carries no schema: the sessions' default names it, as
    # docs/deploy.md#behind-a-connection-pooler says
    await admin.execute(f'ALTER DATABASE "{name}" SET search_path = skiplock')
    direct, pooled = f"{pg_server.rpartition('/')[0]}/{name}", pgbouncer.dsn(name)
    try:
        env = {**os.environ, "DATABASE_URL": pooled, "DATABASE_DIRECT_URL": direct, "PIPELINE_PLUGINS": ""}
        cli = await asyncio.create_subprocess_exec(sys.executable, "-m", "app", "migrate", env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        conn = await connect(pooled, pooled=True)
        try:
            ours = await migrate(conn, [])  # PIPELINE_PLUGINS="": the queue's chain
        finally:
            await conn.close()
        out, err = await cli.communicate()
        assert cli.returncode == 0, err.decode()
        theirs = json.loads(out)["applied"]
        every = [v for v, _ in chain([])]
        assert sorted(ours + theirs) == every  # each applied once, by one of the two
        app = create_app(pooled_settings(pooled, direct), stages=BOTH)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                r = await client.get("/health/ready")
            assert r.status_code == 200, r.text
        finally:
            await app.state.runtime.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_the_worker_listens_on_the_direct_url_and_works_through_the_pooler(pool, dsn, pooled_dsn):
    handled = asyncio.Event()

    async def handle(job, ctx):
        handled.set()

    settings = pooled_settings(pooled_dsn, dsn, worker_poll_seconds=60, worker_grace_seconds=1)
    work = await create_pool(pooled_dsn, 4, pooled=True)
    worker = Worker(work, dsn, [Stage(type="woken", handler=handle)], settings)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: pool.fetchval("SELECT EXISTS (SELECT 1 FROM runs WHERE trigger = 'worker')"))
        await asyncio.sleep(0.2)  # idle now, for a poll of a minute: only NOTIFY can wake it
        await q.enqueue(pool, NewJob(type="woken"))
        await asyncio.wait_for(handled.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)
        await work.close()
    row = await pool.fetchrow("SELECT jobs_done, finished_at FROM runs WHERE trigger = 'worker'")
    assert row["jobs_done"] == 1 and row["finished_at"] is not None


async def test_the_pooler_keeps_serving_after_64_kib_of_its_own_log(pool, pgbouncer, pooled_dsn):
    """PgBouncer writes a log line to stderr too for every login, close and cancel. The
    test helper once gave it an unread pipe there: after about 64 KiB of lines (a few
    hundred connections) its next write blocked, and with it every client of the pooler."""
    async def login_and_leave() -> None:
        conn = await connect(pooled_dsn, pooled=True)
        await conn.close()
    for _ in range(25):  # 500 logins and closes, 20 at a time; a blocked pooler fails, not hangs
        await asyncio.wait_for(asyncio.gather(*(login_and_leave() for _ in range(20))), 30)
    conn = await asyncio.wait_for(connect(pooled_dsn, pooled=True), 10)
    try:
        assert await asyncio.wait_for(conn.fetchval("SELECT 1"), 10) == 1
    finally:
        await conn.close()


async def test_a_pooler_without_the_direct_url_is_named_as_such(pool, pooled_dsn):
    """DATABASE_URL at a transaction pooler and no DATABASE_DIRECT_URL: the CLI says what
    to set, not 'database unreachable'."""
    from tests.cli.test_cli_operator import skiplock
    answers = [await asyncio.to_thread(skiplock, *args, dsn=pooled_dsn)
               for args in (["run-once"], *[["jobs", "ls"]] * 6)]
    failed = [a for a in answers if a.returncode != 0]
    assert failed and failed[0].args[1:] == ["run-once"]  # the pool's startup parameter, every time
    for a in failed:
        assert a.returncode == 1 and a.stderr.startswith("error: DATABASE_URL behaves like a transaction "
                                                         "pooler"), a.stderr
        assert "set DATABASE_DIRECT_URL" in a.stderr and a.stderr.count("\n") == 1
