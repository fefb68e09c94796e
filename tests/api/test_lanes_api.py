"""GET /lanes shows a tenant its own lanes (an admin every one); PATCH /lanes/{id} lets an
operator pause a lane or set its priority, and the next claim obeys."""

from __future__ import annotations

import uuid

from serving_kit import Recorder

from app.engine import jobs as q
from tests import factories as f


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_tenants_see_their_lanes_and_operators_rank_them(make_client, pool, admin_headers):
    client = await make_client(stages=[Recorder("t").stage], api_key=False)
    keys, lanes = {}, {}
    for name in ("ann", "bob"):
        t = await f.tenant(pool, f"{name}@example.com")
        keys[name], lanes[name] = t.key, t.lane
        await f.jobs(pool, "t", 2, lane=lanes[name])
    await f.jobs(pool, "t", 1)  # the default lane: nobody's

    ann = (await client.get("/lanes", headers=_auth(keys["ann"]))).json()
    assert [lane["id"] for lane in ann["data"]] == [str(lanes["ann"])] and ann["nextCursor"] is None
    first = (await client.get("/lanes?limit=2", headers=admin_headers)).json()
    rest = (await client.get(f"/lanes?limit=2&cursor={first['nextCursor']}", headers=admin_headers)).json()
    seen = [lane["id"] for lane in first["data"] + rest["data"]]
    assert seen == sorted(seen) and set(seen) == {str(lanes["ann"]), str(lanes["bob"]), str(uuid.UUID(int=0))}

    # a tenant may not rank a lane, not even its own
    denied = await client.patch(f"/lanes/{lanes['ann']}", json={"paused": True}, headers=_auth(keys["ann"]))
    assert denied.status_code == 403
    assert (await client.patch(f"/lanes/{uuid.uuid4()}", json={"paused": True},
                               headers=admin_headers)).status_code == 404
    empty = await client.patch(f"/lanes/{lanes['ann']}", json={}, headers=admin_headers)
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "invalid_request"

    paused = await client.patch(f"/lanes/{lanes['ann']}", json={"paused": True}, headers=admin_headers)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    boosted = await client.patch(f"/lanes/{lanes['bob']}", json={"priority": 99}, headers=admin_headers)
    assert boosted.json() == {"id": str(lanes["bob"]), "ownerId": boosted.json()["ownerId"], "priority": 99,
                              "paused": False}
    got = await q.claim(pool, f.lease(), await f.run(pool), 10)
    assert [j.lane for j in got] == [lanes["bob"], lanes["bob"], uuid.UUID(int=0)]  # ann's waits
    # the operator's changes are in the audit log, as the admin who made them (the set-up
    # made its lanes as the system; the claim above wrote nothing there)
    audited = await pool.fetch("SELECT actor_kind, op, row_id, new_row->>'paused' AS paused, "
                               "new_row->>'priority' AS priority FROM audit_log "
                               "WHERE table_name = 'lanes' AND actor_kind <> 'system' ORDER BY id")
    assert [(r["actor_kind"], r["op"], r["row_id"]) for r in audited] == [
        ("admin", "UPDATE", str(lanes["ann"])), ("admin", "UPDATE", str(lanes["bob"]))]
    assert (audited[0]["paused"], audited[1]["priority"]) == ("true", "99")
