"""The realtime rules, each against the real database: a sequence per room, the replay
window as a rule (a gap whether or not pruned), the gap message, a cursor that never
passes an event it did not hand over, who reads which room, and what the pipeline and
people emit."""

from __future__ import annotations

from app.engine import events as store
from app.engine.tenancy import tenant_transaction
from app.engine.accounts import authenticate
from app.engine.db import create_pool
from app.pipeline.loop import Pipeline
from tests.api.serving_kit import assert_error, make_settings
from tests.events.conftest import STAGES, person_enqueues


async def _get(client, tenant, **params):
    return await client.get("/events", params=params, headers=tenant.headers)


async def test_sequence_replay_window_gap_and_cursor(pool, client, tenants):
    a, b, admin = tenants
    await person_enqueues(pool, a.lane, 7)          # lane:<a> gets seq 1..7 (EVENTS_REPLAY=5)
    room = f"lane:{a.lane}"
    rows = await pool.fetch("SELECT seq, type, data FROM events WHERE room = $1 ORDER BY seq", room)
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert {r["type"] for r in rows} == {"jobs.created"} and rows[0]["data"]["count"] == 1
    # the same statements numbered the owner's account room and 'system' on their own
    assert await pool.fetchval("SELECT max(seq) FROM events WHERE room = $1", f"account:{a.user_id}") == 7
    assert await pool.fetchval("SELECT head_seq FROM event_rooms WHERE room = 'system'") == 7

    for pruned in (False, True):
        if pruned:  # the window is a rule: the answers do not change once the rows are gone
            assert await store.prune(pool, 5, 1000) == 2 + 2 + 2  # lane, account and system rooms
        body = (await _get(client, a, room=room, after=0)).json()
        assert body["data"][0] == {"type": "gap", "room": room, "after": 0, "oldest": 3}
        assert [e["seq"] for e in body["data"][1:]] == [3, 4, 5, 6, 7] and body["nextCursor"] == 7
        body = (await _get(client, a, room=room, after=2)).json()   # exactly the window: no gap
        assert [e.get("seq") for e in body["data"]] == [3, 4, 5, 6, 7]
        assert (await _get(client, a, room=room, after=1)).json()["data"][0]["type"] == "gap"
    event = (await _get(client, a, room=room, after=6)).json()["data"][0]
    assert set(event) == {"room", "seq", "type", "data", "at"} and event["data"]["lane"] == str(a.lane)

    # the cursor moves only to what was handed over: a short page ends at its last event
    body = (await _get(client, a, room=room, after=3, limit=2)).json()
    assert [e["seq"] for e in body["data"]] == [4, 5] and body["nextCursor"] == 5
    assert (await _get(client, a, room=room, after=7)).json() == {"data": [], "nextCursor": 7}
    # a cursor this room never reached (another database, a reset): a gap, then the window
    body = (await _get(client, a, room=room, after=99)).json()
    assert body["data"][0] == {"type": "gap", "room": room, "after": 99, "oldest": 3}
    # a room with nothing yet is empty, not an error
    assert (await _get(client, b, room=f"lane:{b.lane}")).json() == {"data": [], "nextCursor": 0}

    # strict parameters, one error shape
    assert_error(await _get(client, a, room="campaign:x"), 400, "invalid_parameter")
    assert_error(await _get(client, a, room=room, after=-1), 400, "invalid_parameter")
    assert_error(await _get(client, a, room=room, since=1), 400, "unknown_parameter")
    assert_error(await client.get("/events", params={"room": room}), 401, "unauthorized")


async def test_tenants_read_only_their_rooms(pool, client, tenants):
    a, b, admin = tenants
    await person_enqueues(pool, a.lane, 2)
    for room in (f"lane:{a.lane}", f"account:{a.user_id}", "system"):
        assert_error(await _get(client, b, room=room), 404, "not_found")
        assert (await _get(client, admin, room=room)).status_code == 200
    assert len((await _get(client, a, room=f"account:{a.user_id}")).json()["data"]) == 2
    assert_error(await _get(client, a, room="system"), 404, "not_found")
    # below the API: row-level security itself, however the query is written
    actor_b = await authenticate(pool, b.key)
    async with tenant_transaction(pool, actor_b) as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        assert await conn.fetchval("SELECT count(*) FROM event_rooms") == 0
    actor_a = await authenticate(pool, a.key)
    async with tenant_transaction(pool, actor_a) as conn:
        rooms = {r["room"] for r in await conn.fetch("SELECT DISTINCT room FROM events")}
    assert rooms == {f"lane:{a.lane}", f"account:{a.user_id}"}


async def test_what_people_and_the_pipeline_emit(pool, dsn, client, tenants):
    a, b, admin = tenants
    # the pipeline's own writes name nobody: jobs it enqueues are no event of a person
    await pool.executemany("INSERT INTO jobs (type, lane) VALUES ($1, $2)",
                           [("record", a.lane)] * 25 + [("broken", a.lane)] * 2)
    assert await pool.fetchval("SELECT count(*) FROM events") == 0
    run = await Pipeline(pool, STAGES, make_settings(dsn)).run(trigger="test")
    settled = await pool.fetch("SELECT data FROM events WHERE room = $1 AND type = 'jobs.settled' ORDER BY seq",
                               f"lane:{a.lane}")
    by_type = {r["data"]["type"]: r["data"] for r in settled}
    # counts per lane and type, not one event per job: the run's end numbered what its
    # three completions (25 jobs, batch 10) parked as one event, which says so
    assert len(settled) == len(by_type) == 2
    record = by_type["record"]
    assert (record["done"], record["failed"], record["batches"], record["runIds"]) == (25, 0, 3, [str(run.run_id)])
    assert by_type["broken"]["failed"] == 2
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    system = await pool.fetch("SELECT type, data FROM events WHERE room = 'system' ORDER BY seq")
    assert [r["type"] for r in system][:1] == ["run.started"] and system[-1]["type"] == "run.finished"
    assert system[-1]["data"]["stopReason"] == "no_work" and system[-1]["data"]["jobsDone"] == run.jobs_done

    # a person's retry through the API: one 'jobs.retried' in the lane, the account and 'system'
    failed_id = await pool.fetchval("SELECT id FROM jobs WHERE type = 'broken' LIMIT 1")
    response = await client.post(f"/jobs/{failed_id}/retry", headers=a.headers)
    assert response.status_code == 200, response.text
    for room in (f"lane:{a.lane}", f"account:{a.user_id}", "system"):
        last = await pool.fetchrow("SELECT type, data FROM events WHERE room = $1 ORDER BY seq DESC LIMIT 1", room)
        assert last["type"] == "jobs.retried" and last["data"]["ids"] == [str(failed_id)]


async def test_a_database_can_turn_events_off(pool, dsn, tenants):
    """skiplock.events = off for the database: new sessions write no event, through the
    pipeline, a person or a run, and the queue works as before; back on, rooms go on
    numbering where they stopped."""
    a, b, admin = tenants
    await person_enqueues(pool, a.lane, 2)
    room = f"lane:{a.lane}"
    name = await pool.fetchval("SELECT current_database()")
    await pool.execute(f"ALTER DATABASE {name} SET skiplock.events = off")
    off = await create_pool(dsn, size=4)
    try:
        assert await off.fetchval("SELECT events_on()") is False
        before = await pool.fetchval("SELECT count(*) FROM events")
        await person_enqueues(off, a.lane, 3)
        await off.executemany("INSERT INTO jobs (type, lane) VALUES ($1, $2)", [("record", a.lane)] * 4)
        run = await Pipeline(off, STAGES, make_settings(dsn)).run(trigger="test")
        assert run.jobs_done == 9 and run.stop_reason == "no_work"
        assert await pool.fetchval("SELECT count(*) FROM events") == before
        # the counters did not notice: nothing pending, each lane served what it ran
        assert await pool.fetchval("SELECT coalesce(sum(pending), 0) FROM job_lane_counts") == 0
    finally:
        await pool.execute(f"ALTER DATABASE {name} RESET skiplock.events")
        await off.close()
    back = await create_pool(dsn, size=2)
    try:
        await person_enqueues(back, a.lane, 1)
        assert await pool.fetchval("SELECT max(seq) FROM events WHERE room = $1", room) == 3
    finally:
        await back.close()
