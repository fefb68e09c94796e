"""An operator's pause holds: a tenant whose lane an operator paused (PATCH /lanes/{id})
cannot lift it by pausing and resuming its own campaign; only the operator's resume does."""

from __future__ import annotations

from app.engine import jobs as q
from tests.outreach import factories as f


async def test_a_tenant_cannot_lift_an_operators_pause_by_pausing_and_resuming(api, pool, admin_headers):
    key = {"Authorization": f"Bearer {await f.api_key(pool, 'mallory@example.com', plan='free')}"}
    made = await api.post("/campaigns", json={"url": "https://mallory.example"}, headers=key)
    lane = made.json()["id"]
    held = await api.patch(f"/lanes/{lane}", json={"paused": True}, headers=admin_headers)
    assert held.status_code == 200 and held.json()["paused"] is True

    for step in ("pause", "resume", "pause", "resume"):
        assert (await api.post(f"/campaigns/{lane}/{step}", headers=key)).status_code == 200
    mine = (await api.get("/lanes", headers=key)).json()["data"]
    assert [(x["id"], x["paused"]) for x in mine] == [(lane, True)]
    assert await q.claim(pool, f.lease("brief"), await f.run(pool), 10) == []  # its brief waits

    # the operator's resume lifts the hold; the campaign's own pause works as before
    assert (await api.patch(f"/lanes/{lane}", json={"paused": False}, headers=admin_headers)).json()["paused"] is False
    assert (await api.post(f"/campaigns/{lane}/pause", headers=key)).status_code == 200
    assert (await api.get("/lanes", headers=key)).json()["data"][0]["paused"] is True
    assert (await api.post(f"/campaigns/{lane}/resume", headers=key)).status_code == 200
    assert (await api.get("/lanes", headers=key)).json()["data"][0]["paused"] is False
    assert len(await q.claim(pool, f.lease("brief"), await f.run(pool), 10)) == 1
