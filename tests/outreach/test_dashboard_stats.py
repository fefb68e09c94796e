"""GET /stats with the example's panels: the shared quota and the allowances, read on the
request's own connection. It took a second connection from the pool while holding its
transaction, so as many /stats at once as the pool has connections waited for each other
for ever, and every request behind them with them."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.outreach import factories as f
from tests.outreach.conftest import api_client

POOL = 3


@pytest.fixture
async def api(dsn):
    # the tenant login (TENANT_DATABASE_URL) for user keys; admin keys on the small pool
    async with api_client(dsn, timeout=60, db_pool_size=POOL) as client:
        yield client


def quota_panel(answer: httpx.Response) -> dict:
    assert answer.status_code == 200, answer.text
    [panel] = [p for p in answer.json()["panels"] if p["title"] == "Shared quota today"]
    return panel


async def test_more_stats_at_once_than_the_pool_holds_all_answer(api, pool):
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'ops@example.com', admin=True)}"}
    ann = {"Authorization": f"Bearer {await f.api_key(pool, 'ann@example.com', plan='pro')}"}
    await pool.execute("INSERT INTO quota_ledger (day, units, reserve, spent) "
                       "VALUES ((now() AT TIME ZONE 'UTC')::date, 1000, 100, 37)")
    asked = [asyncio.ensure_future(api.get("/stats", headers=admin)) for _ in range(POOL * 3)]
    asked += [asyncio.ensure_future(api.get("/stats", headers=ann)) for _ in range(POOL)]
    done, waiting = await asyncio.wait(asked, timeout=45)
    for task in waiting:
        task.cancel()
    assert not waiting, f"{len(waiting)} of {len(asked)} GET /stats never answered"
    # the shared number, as every key reads it: the tenant's role may read the quota's row
    rows = {tuple(quota_panel(t.result())["rows"][0]) for t in asked}
    assert rows == {(963, 37, 1000, 100)}
    assert (await api.get("/jobs?limit=1", headers=ann)).status_code == 200  # and the API goes on


async def test_a_tenants_dashboard_reads_its_own_batches_open_first(api, pool):
    ann_key = await f.api_key(pool, "ann@example.com", plan="pro")
    bob_key = await f.api_key(pool, "bob@example.com", plan="pro")
    admin_key = await f.api_key(pool, "ops@example.com", admin=True)
    lanes = {}
    for who, key, url in (("ann1", ann_key, "https://a1.example"), ("ann2", ann_key, "https://a2.example"),
                          ("bob", bob_key, "https://b.example")):
        made = await api.post("/campaigns", json={"url": url}, headers={"Authorization": f"Bearer {key}"})
        lanes[who] = made.json()["id"]
    await pool.execute("DELETE FROM batches")
    # (lane, status, minutes ago): ann's open ones are older than her newest finished ones
    made = [("ann1", "completed", 1), ("ann2", "running", 50), ("ann1", "failed", 2),
            ("ann2", "pending", 40), ("bob", "running", 0), ("bob", "completed", 3), ("ann1", "completed", 60)]
    ids = []
    for who, status, ago in made:
        ids.append(await pool.fetchval(
            "INSERT INTO batches (lane, status, created_at) VALUES ($1, $2, now() - make_interval(mins => $3)) "
            "RETURNING id", lanes[who], status, ago))
    by = dict(zip(ids, made))

    async def shown(key):
        answer = await api.get("/stats", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        return [by[uuid.UUID(b["id"])] for b in answer.json()["batches"]]

    anns = [m for m in made if m[0].startswith("ann")]
    open_first = sorted(anns, key=lambda m: (m[1] not in ("pending", "running"), m[2]))
    assert await shown(ann_key) == open_first            # her own only, open first, newest first
    assert await shown(bob_key) == [("bob", "running", 0), ("bob", "completed", 3)]
    assert len(await shown(admin_key)) == len(made)        # the operator sees every tenant's
