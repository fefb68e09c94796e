"""A tenant's GET /jobs reads its own lanes, not the whole table: the same rows and pages
as the admin's list narrowed to those lanes, at a cost that does not grow with another
tenant's jobs."""

from __future__ import annotations

import uuid

from serving_kit import Recorder

from app.engine import accounts
from app.engine.jobs import DEFAULT_LANE
from app.engine.queries import query
from app.engine.tenancy import tenant_transaction
from tests import factories as f
from tests.plans import generic_plan
from tests.api.test_pagination import page_through


async def _tenant(pool, email: str, campaigns: int):
    key = await f.api_key(pool, email, plan="pro")
    owner = (await accounts.authenticate(pool, key)).user_id
    lanes = [await f.campaign(pool, owner) for _ in range(campaigns)]
    return key, lanes


async def test_a_tenant_pages_exactly_its_own_jobs_newest_first(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("export").stage], api_key=False)
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 3)
    bob, bob_lanes = await _tenant(pool, "bob@b.example", 1)
    # interleaved in time, so alice's lanes alternate in the list and bob's jobs sit between
    for i in range(30):
        await f.jobs(pool, "record" if i % 3 else "export", 1, lane=alice_lanes[i % 3])
        await f.jobs(pool, "record", 2, lane=bob_lanes[0])
    await f.jobs(pool, "record", 5, lane=DEFAULT_LANE)
    await pool.execute("UPDATE jobs SET status = 'failed' WHERE lane = $1 AND type = 'export'", alice_lanes[0])
    # running jobs are listed apart (the lane index leaves them out): some of each tenant's
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE id IN (SELECT id FROM jobs WHERE lane = ANY ($1::uuid[]) AND status = 'pending' "
                       "ORDER BY id LIMIT 7)", [alice_lanes[2], bob_lanes[0]])
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'root@ops.example', admin=True)}"}
    mine = {"Authorization": f"Bearer {alice}"}

    async def expected(query_string: str, lanes) -> list[str]:
        """The reference: the admin's list (the whole table), one of alice's lanes at a time."""
        client.headers.update(admin)
        rows = []
        for lane in lanes:
            rows += await page_through(client, f"/jobs?limit=100&lane={lane}&{query_string}".rstrip("&"))
        client.headers.pop("Authorization")
        return [r["id"] for r in sorted(rows, key=lambda r: uuid.UUID(r["id"]), reverse=True)]

    for query_string, lanes in (("", alice_lanes), ("status=failed", alice_lanes), ("type=export", alice_lanes),
                                ("status=running", alice_lanes), (f"lane={alice_lanes[1]}", [alice_lanes[1]]),
                                (f"lane={alice_lanes[2]}", [alice_lanes[2]])):
        want = await expected("" if query_string.startswith("lane=") else query_string, lanes)
        client.headers.update(mine)
        got = [r["id"] for r in await page_through(client, f"/jobs?limit=4&{query_string}".rstrip("&"))]
        client.headers.pop("Authorization")
        assert got == want and got, query_string
    # another tenant's lane, asked for by name, is just empty
    client.headers.update(mine)
    assert await page_through(client, f"/jobs?lane={bob_lanes[0]}") == []


async def test_a_page_reads_the_callers_lanes_not_other_tenants_jobs(pool):
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 2)
    _, bob_lanes = await _tenant(pool, "bob@b.example", 1)
    for lane in alice_lanes:
        await f.jobs(pool, "record", 60, lane=lane)
    await pool.execute("""INSERT INTO jobs (type, lane, status, finished_at)
        SELECT 'record', $1, 'done', now() FROM generate_series(1, 5000) g""", bob_lanes[0])
    await pool.execute("ANALYZE jobs")
    actor = await accounts.authenticate(pool, alice)
    async with tenant_transaction(pool, actor) as conn:
        plan = await generic_plan(conn, query("jobs_list_own_lanes"), None, None, None, None, None, 51)
    assert "jobs_lane_list_idx" in plan, plan
    assert "jobs_pkey" not in plan and "Seq Scan on jobs" not in plan, plan
    # none of bob's 5,000 was read and dropped: no scan of jobs filters any row away
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        if " on jobs " in line:
            details = [x for x in lines[i + 1:] if "->" not in x][:6]
            assert not any("Rows Removed by Filter" in x for x in details), plan
