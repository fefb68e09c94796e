"""One tenant's slow requests cannot take every pooled connection from the others.

The attack (found by a resource-exhaustion pass): a tenant with a million pending
jobs of its own keeps a dozen `GET /jobs?status=failed` and `GET /stats` in flight, each a
second or more; every request holds a pooled connection for as long as its route runs,
so all ten were the attacker's and another tenant's `GET /jobs` went from 14 ms to 4.6 s
(p95). Here the slow reads are made slow for certain: a lock the test holds on `jobs`
keeps them waiting. A tenant's requests past TENANT_REQUESTS_IN_FLIGHT wait their turn
without a connection, and another tenant's request still gets one."""

from __future__ import annotations

import asyncio

from serving_kit import make_settings

from tests import factories as f

LIMIT = 2
POOL = 4


async def _tenant(pool, email: str):
    return (await f.tenant(pool, email)).headers


async def _waiting_on_jobs(pool) -> int:
    return await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")


async def _until(check, what: str) -> None:
    for _ in range(600):  # a generous bound for something that takes milliseconds
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_a_tenant_past_its_requests_in_flight_waits_its_turn_and_others_still_get_a_connection(
        make_client, pool, dsn):
    client = await make_client(make_settings(dsn, tenant_requests_in_flight=LIMIT, db_pool_size=POOL),
                               api_key=False)
    ann = await _tenant(pool, "ann@inflight.example")
    bob = await _tenant(pool, "bob@inflight.example")
    assert (await client.get("/jobs", headers=ann)).status_code == 200  # the pools are open

    async with pool.acquire() as locker:
        tr = locker.transaction()
        await tr.start()
        try:
            await locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            anns = [asyncio.create_task(client.get("/jobs?status=failed", headers=ann)) for _ in range(POOL + 1)]

            async def ann_at_the_database() -> bool:
                return await _waiting_on_jobs(pool) >= LIMIT
            await _until(ann_at_the_database, "ann's first requests at the database")
            bobs = asyncio.create_task(client.get("/jobs", headers=bob))

            async def bob_at_the_database() -> bool:
                return await _waiting_on_jobs(pool) > LIMIT
            # before: ann's five requests took all four connections and bob's waited for one
            await _until(bob_at_the_database, "bob's request got a connection beside ann's")
            assert await _waiting_on_jobs(pool) == LIMIT + 1
            assert not any(t.done() for t in anns)  # ann's others wait their turn, holding no connection
        finally:
            await tr.rollback()

    assert [r.status_code for r in await asyncio.gather(*anns)] == [200] * (POOL + 1)
    assert (await bobs).status_code == 200
    # turns are given back when requests end, errors included
    assert (await client.get("/jobs?status=bogus", headers=ann)).status_code == 400
    results = await asyncio.gather(*[client.get("/jobs", headers=ann) for _ in range(LIMIT * 3)])
    assert [r.status_code for r in results] == [200] * (LIMIT * 3)
    assert client._transport.app.state.tenant_in_flight._turns == {}  # idle tenants are forgotten


async def test_admin_keys_are_not_counted(make_client, pool, dsn):
    client = await make_client(make_settings(dsn, tenant_requests_in_flight=1, db_pool_size=POOL))
    results = await asyncio.gather(*[client.get("/jobs") for _ in range(POOL)])
    assert [r.status_code for r in results] == [200] * POOL
