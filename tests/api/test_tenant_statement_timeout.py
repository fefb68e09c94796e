"""TENANT_STATEMENT_TIMEOUT_SECONDS: PostgreSQL cancels a tenant request's statement that
runs too long, and the request answers 503 statement_timeout with Retry-After, not a 500.

The statements are made slow for certain: the test holds a lock the request's statement
must wait for (a lock wait counts toward statement_timeout). The limit is set
transaction-locally, so the pooled connection goes back without it; admin keys and the
pipeline (whose runs take minutes) are not limited."""

from __future__ import annotations

import asyncio
import time
import uuid

from serving_kit import AUTH, Recorder, assert_error, make_settings

from app.pipeline.stage import Stage
from tests import factories as f

LIMIT = 0.2  # seconds: the lock below is held five times as long or more
BOUND = 10  # a request still waiting for the lock this long was not cut: the test fails, not hangs


async def _tenant_with_a_pending_job(pool) -> tuple[dict[str, str], uuid.UUID]:
    ann = await f.tenant(pool, "ann@timeout.example")
    [job] = await f.jobs(pool, "record", 1, lane=ann.lane)
    return ann.headers, job


async def _statement_timeout_of_every_connection(app) -> set[str]:
    """statement_timeout as each connection of the tenant requests' pool has it now."""
    runtime = app.state.runtime
    tenant_pool = await runtime.tenant_pool()
    conns = [await tenant_pool.acquire() for _ in range(runtime.settings.db_pool_size)]
    try:
        return {await c.fetchval("SHOW statement_timeout") for c in conns}
    finally:
        for c in conns:
            await tenant_pool.release(c)


async def test_a_tenant_write_held_on_a_row_lock_is_cancelled_and_the_next_request_works(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, tenant_statement_timeout_seconds=LIMIT, db_pool_size=2),
                               stages=[Recorder("record").stage], api_key=False)
    ann, job = await _tenant_with_a_pending_job(pool)
    app = client._transport.app
    before = await _statement_timeout_of_every_connection(app)
    assert before == {"0"}, before  # the server's own: no limit

    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", job)  # the cancel must wait
        started = time.monotonic()
        r = await asyncio.wait_for(client.post(f"/jobs/{job}/cancel", headers=ann), BOUND)
        took = time.monotonic() - started
    error = assert_error(r, 503, "statement_timeout")
    assert r.headers["retry-after"] == "1"
    assert "rolled back" in error["message"] and "0.2 s" in error["message"]
    assert took < 2, took
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "pending"

    # nothing of the limit stays on the pooled connections, and the next request works
    assert await _statement_timeout_of_every_connection(app) == before
    again = await client.post(f"/jobs/{job}/cancel", headers=ann)
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "cancelled"


async def test_a_tenant_read_held_on_a_table_lock_is_cancelled_too(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, tenant_statement_timeout_seconds=LIMIT),
                               stages=[Recorder("record").stage], api_key=False)
    ann, job = await _tenant_with_a_pending_job(pool)
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        r = await asyncio.wait_for(client.get("/jobs", headers=ann), BOUND)
    assert_error(r, 503, "statement_timeout")
    listed = await client.get("/jobs", headers=ann)
    assert listed.status_code == 200 and [j["id"] for j in listed.json()["data"]] == [str(job)]


async def test_admin_keys_are_not_limited(make_client, pool, dsn, admin_headers):
    client = await make_client(make_settings(dsn, tenant_statement_timeout_seconds=LIMIT),
                               stages=[Recorder("record").stage], api_key=False)
    _, job = await _tenant_with_a_pending_job(pool)
    async with pool.acquire() as holder:
        tr = holder.transaction()
        await tr.start()
        try:
            await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", job)
            cancel = asyncio.create_task(client.post(f"/jobs/{job}/cancel", headers=admin_headers))
            await asyncio.sleep(5 * LIMIT)
            assert not cancel.done()  # still waiting for the lock, past the tenants' limit
        finally:
            await tr.rollback()
    r = await cancel
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled"


async def test_a_cron_run_is_not_limited_after_tenant_requests_on_its_pool(make_client, pool, dsn):
    """The pipeline runs for up to PIPELINE_BUDGET_SECONDS: a statement of one of its
    stages may take longer than a tenant's limit, on the very connections tenants used."""
    slept = []

    async def slow(job, ctx) -> None:
        slept.append(await ctx.db.fetchval("SELECT pg_sleep($1::float)::text || current_setting('statement_timeout')",
                                           5 * LIMIT))

    client = await make_client(make_settings(dsn, tenant_statement_timeout_seconds=LIMIT, tenant_database_url=None,
                                             db_pool_size=2),
                               stages=[Recorder("record").stage, Stage(type="slow", handler=slow)], api_key=False)
    ann, job = await _tenant_with_a_pending_job(pool)
    # tenant transactions at once, so on both pooled connections, each with the limit set
    listed = await asyncio.gather(*(client.get("/jobs", headers=ann) for _ in range(4)))
    assert [r.status_code for r in listed] == [200] * 4
    await f.jobs(pool, "slow", 1)
    r = await client.post("/cron/pipeline", headers=AUTH, json={})
    assert r.status_code == 200, r.text
    assert slept == ["0"]  # pg_sleep's void is '', then the limit in force: none
    assert await pool.fetchval("SELECT status FROM jobs WHERE type = 'slow'") == "done"


async def test_a_cancelled_hook_cut_at_the_limit_answers_the_limits_503(make_client, pool, dsn):
    """A stage's `cancelled` hook runs in the tenant's cancel (the example's refund of a
    draft's credit): its statement cut at the limit was wrapped as the hook's failure, a
    500 hook_failed with a traceback in the log, where every other cut statement is a 503."""
    async def reads_runs(job, ctx) -> None:
        await ctx.db.fetchval("SELECT count(*) FROM runs")

    stage = Stage(type="record", handler=Recorder().handle, cancelled=reads_runs)
    client = await make_client(make_settings(dsn, tenant_statement_timeout_seconds=LIMIT),
                               stages=[stage], api_key=False)
    ann, job = await _tenant_with_a_pending_job(pool)
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")  # only the hook reads it
        r = await asyncio.wait_for(client.post(f"/jobs/{job}/cancel", headers=ann), BOUND)
    assert_error(r, 503, "statement_timeout")
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "pending"
    again = await client.post(f"/jobs/{job}/cancel", headers=ann)
    assert again.status_code == 200 and again.json()["status"] == "cancelled", again.text


async def test_a_cancel_whose_hook_loses_its_connection_answers_503(make_client, pool, dsn):
    """The same hook's connection cut by the server (an operator's pg_terminate_backend, a
    failover) is the database gone, as anywhere else in a request: 503, not the hook's 500."""
    async def cut_off(job, ctx) -> None:
        pid = await ctx.db.fetchval("SELECT pg_backend_pid()")
        await pool.execute("SELECT pg_terminate_backend($1, 5000)", pid)
        await ctx.db.fetchval("SELECT 1")

    stage = Stage(type="record", handler=Recorder().handle, cancelled=cut_off)
    client = await make_client(make_settings(dsn), stages=[stage], api_key=False)
    ann, job = await _tenant_with_a_pending_job(pool)
    r = await asyncio.wait_for(client.post(f"/jobs/{job}/cancel", headers=ann), BOUND)
    assert_error(r, 503, "database_unavailable")
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "pending"
