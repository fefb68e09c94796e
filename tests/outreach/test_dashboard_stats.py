"""GET /stats with the example's panels: the shared quota and the allowances, read on the
request's own connection. It took a second connection from the pool while holding its
transaction, so as many /stats at once as the pool has connections waited for each other
for ever, and every request behind them with them."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.api import create_app
from tests import factories as f
from tests.outreach.conftest import settings

POOL = 3


@pytest.fixture
async def api(dsn):
    # the tenant login (TENANT_DATABASE_URL) for user keys; admin keys on the small pool
    app = create_app(settings(database_url=dsn, run_scheduler=False, db_pool_size=POOL))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test",
                                 timeout=60) as c:
        yield c
    await app.state.runtime.close()


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
