"""The pipeline's settled counts: parked with the change, numbered in passes (migration
0032). A settling statement never takes a room's row; it parks its counts per lane and
type. A reader numbers what is parked before it reads, a follower's hub within a second,
a run at its heartbeat and end; passes that overlap never count a row twice, each lane's
event adds up what it covers, and a room held open holds up neither a heartbeat nor a
reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid

import asyncpg
from websockets.asyncio.client import connect

from app.engine import events as store
from app.engine import jobs as q
from app.engine.batches import report_progress
from app.engine.db import connect as db_connect
from app.engine.runs import beat
from app.engine.tenancy import acting
from app.events.hub import EventHub
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from app.settings import load_settings
from tests.events.conftest import PERSON, pool_getter
from tests.factories import jobs, lease, run

NOT_WAITING = 5.0  # seconds: far more than a statement takes, far less than the holder holds
WAIT = 10          # seconds, for what crosses processes on a loaded machine


@contextlib.asynccontextmanager
async def holding_room(dsn: str, room: str):
    """Inside: another connection's open transaction holds the room's row, as a person's
    write does until it commits (or a psql session left open); it commits on the way out."""
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM event_rooms WHERE room = $1 FOR NO KEY UPDATE", room)
        yield
        await holder.execute("COMMIT")
    finally:
        await holder.close()


async def _lane_with_room(pool, n: int, head: int = 0) -> tuple[uuid.UUID, str]:
    """A lane with `n` pending jobs of type t, and its room's row at seq `head`."""
    lane = uuid.uuid4()
    await jobs(pool, "t", n, lane=lane)
    await pool.execute("INSERT INTO event_rooms (room, head_seq) VALUES ($1, $2)", f"lane:{lane}", head)
    return lane, f"lane:{lane}"


async def _settle(pool, lane: uuid.UUID, n: int, run_id: uuid.UUID) -> None:
    got = await q.claim(pool, lease("t"), run_id, n)
    assert len(got) == n and all(j.lane == lane for j in got)
    assert len(await q.complete(pool, run_id, [j.id for j in got])) == n


async def test_counts_are_parked_with_the_change_and_a_reader_numbers_them(pool, dsn):
    lane, room = await _lane_with_room(pool, 6, head=7)
    run_id = await run(pool)
    # a person's write holds the lane's room until it commits: settling does not wait for it
    async with holding_room(dsn, room):
        await asyncio.wait_for(_settle(pool, lane, 3, run_id), NOT_WAITING)
    # written with the change, not numbered: nothing a reader could see yet
    assert await pool.fetchval("SELECT count(*) FROM events WHERE room = $1", room) == 0
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog WHERE $1 = ANY (lanes)", lane) == 1
    # a settling statement rolled back parks nothing
    rest = await q.claim(pool, lease("t"), run_id, 3)
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert len(await q.complete(conn, run_id, [rest[0].id])) == 1
        await tx.rollback()
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 1
    assert len(await q.complete(pool, run_id, [j.id for j in rest])) == 3
    # the reader numbers first: one event for the lane, both statements added up
    page = await store.read_after(pool, room, 7, 1000, 10)
    assert [(e.seq, e.type) for e in page.events] == [(8, "jobs.settled")]
    data = page.events[0].data
    assert (data["done"], data["failed"], data["batches"], data["runIds"]) == (6, 0, 2, [str(run_id)])
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    assert await store.number_settled(pool) == 0  # nothing left: a pass writes nothing


async def test_overlapping_passes_count_each_parked_row_once(pool):
    lanes = [uuid.uuid4() for _ in range(4)]
    # 600 settling statements of two lanes each: each lane in 300 of them
    rows = [([lanes[k % 4], lanes[(k + 1) % 4]], k % 3 + 1) for k in range(600)]
    await pool.executemany("INSERT INTO settled_backlog (lanes, types, run_ids, done, failed, retrying, deferred) "
                           "VALUES ($1, '{t,t}', '{NULL,NULL}', ARRAY[$2, 1], '{0,0}', '{0,0}', '{0,0}')", rows)
    parked = {lane: sum(n if ls[0] == lane else 1 for ls, n in rows if lane in ls) for lane in lanes}

    async def passes() -> None:
        async with pool.acquire() as conn:
            while await store.number_settled(conn):
                pass

    await asyncio.gather(*(passes() for _ in range(6)))
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    for lane in lanes:
        events = await pool.fetch("SELECT seq, data FROM events WHERE room = $1 ORDER BY seq", f"lane:{lane}")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # one by one, no hole
        assert sum(e["data"]["done"] for e in events) == parked[lane]
        assert sum(e["data"]["batches"] for e in events) == 300


PARK = ("INSERT INTO settled_backlog (lanes, types, run_ids, done, failed, retrying, deferred) "
        "VALUES (ARRAY[$1::uuid], '{t}', '{NULL}', '{1}', '{0}', '{0}', '{0}')")


async def test_a_pass_leaves_the_rows_another_holds_for_the_next_pass(pool, dsn):
    """A pass reads the backlog from the newest mark on (migration 0048). The rows another
    pass holds are left to it; if it gives them up, the mark must still be below them, or
    no pass would number them."""
    held, free = uuid.uuid4(), uuid.uuid4()
    await pool.execute(PARK, held)
    # a pass that began after the row was parked holds it
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM settled_backlog WHERE $1 = ANY (lanes) FOR UPDATE", held)
        await pool.execute(PARK, free)
        assert await store.number_settled(pool) == 1                    # the free lane's
        await holder.execute("ROLLBACK")
    finally:
        await holder.close()
    assert await store.number_settled(pool) == 1                        # the row it gave up
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    for lane in (held, free):
        assert [r["data"]["done"] for r in await pool.fetch(
            "SELECT data FROM events WHERE room = $1", f"lane:{lane}")] == [1]


async def test_a_mark_restored_from_another_cluster_marks_nothing_here(pool):
    """A dump restored into another cluster carries the old cluster's transaction ids: a mark
    above any this cluster has given out would hide every row parked here."""
    far = "90000000000000"
    await pool.execute("INSERT INTO settled_backlog_marks (xid) VALUES ($1::text::xid8)", far)
    lane = uuid.uuid4()
    await pool.execute(PARK, lane)
    assert await store.number_settled(pool) == 1
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    assert await pool.fetchval("SELECT max(xid) < $1::text::xid8 FROM settled_backlog_marks", far)


SETTLE_ELSEWHERE = """
import asyncio, sys, uuid, asyncpg
async def main():
    conn = await asyncpg.connect(sys.argv[1])
    run_id = uuid.uuid4()
    await conn.execute("INSERT INTO runs (id, trigger) VALUES ($1, 'test')", run_id)
    await conn.execute("UPDATE jobs SET status = 'running', run_id = $1, attempts = 1, locked_at = now() "
                       "WHERE lane = $2", run_id, uuid.UUID(sys.argv[2]))
    await conn.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE run_id = $1", run_id)
    await conn.close()
asyncio.run(main())
"""


async def test_a_follower_gets_what_settles_in_another_process_without_a_heartbeat(pool, dsn, serve, tenants):
    a, _, _ = tenants
    await jobs(pool, "record", 4, lane=a.lane)
    _, host = await serve()
    room = f"lane:{a.lane}"
    async with connect(f"ws://{host}/events/ws?room={room}&after=0",
                       additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), WAIT)) == {"type": "live", "room": room, "seq": 0}
        # a pipeline's statements in another process, its run never beating nor ending:
        # only the follower's hub can number what they park
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", SETTLE_ELSEWHERE, dsn, str(a.lane)],
                                       capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        event = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        assert (event["room"], event["seq"], event["type"]) == (room, 1, "jobs.settled")
        assert (event["data"]["done"], event["data"]["batches"]) == (4, 1)
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0


async def test_a_room_held_open_holds_up_neither_a_heartbeat_nor_a_reader(pool, dsn):
    lane, room = await _lane_with_room(pool, 2)
    run_id = await run(pool)
    await _settle(pool, lane, 2, run_id)
    # a person's transaction left open in the lane's room (psql, a stuck client)
    async with holding_room(dsn, room):
        await asyncio.wait_for(beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={}), NOT_WAITING)
        page = await asyncio.wait_for(store.read_after(pool, room, 0, 1000, 10), NOT_WAITING)
        assert page.events == [] and page.cursor == 0
        # the pass gave up whole: the counts wait for the next one
        assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 1
    assert await store.number_settled(pool) == 1
    rows = await pool.fetch("SELECT seq, data FROM events WHERE room = $1", room)
    assert [(r["seq"], r["data"]["done"]) for r in rows] == [(1, 2)]


async def test_a_tenant_polling_get_events_numbers_what_its_lane_settled(pool, client, tenants):
    a, b, _ = tenants
    await jobs(pool, "t", 3, lane=a.lane)
    await jobs(pool, "t", 2, lane=b.lane)
    run_id = await run(pool)
    got = await q.claim(pool, lease("t"), run_id, 5)
    assert len(await q.complete(pool, run_id, [j.id for j in got])) == 5
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 1
    # the tenant's own transaction runs the pass (as the tables' owner, for every lane),
    # and reads only its own room
    response = await client.get("/events", params={"room": f"lane:{a.lane}"}, headers=a.headers)
    assert response.status_code == 200, response.text
    [event] = response.json()["data"]
    assert (event["seq"], event["type"], event["data"]["done"]) == (1, "jobs.settled", 3)
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    other = await pool.fetchrow("SELECT seq, data FROM events WHERE room = $1", f"lane:{b.lane}")
    assert (other["seq"], other["data"]["done"]) == (1, 2)
    assert (await client.get("/events", params={"room": f"lane:{b.lane}"}, headers=a.headers)).status_code == 404


async def test_a_batch_is_told_its_progress_once_a_pass_counted_from_its_jobs(pool, tenants):
    a, _, _ = tenants
    batch = await pool.fetchval("INSERT INTO batches (lane) VALUES ($1) RETURNING id", a.lane)
    await jobs(pool, "t", 4, lane=a.lane, batch_id=batch, total=10)
    run_id = await run(pool)
    got = await q.claim(pool, lease("t"), run_id, 4)
    await report_progress(pool, run_id, got[0].id, 5)              # a handler reports, then three end
    assert len(await q.complete(pool, run_id, [j.id for j in got[:3]])) == 3
    room = f"batch:{batch}"
    # parked with the changes, not counted in each of them
    assert await pool.fetchval("SELECT count(*) FROM events WHERE room = $1", room) == 0
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog WHERE $1 = ANY (batch_ids)", batch) == 2
    assert await store.number_settled(pool) == 2                   # the lane's settled counts, the batch's progress
    rows = await pool.fetch("SELECT seq, type, data FROM events WHERE room = $1", room)
    # one event for both statements, from the batch's jobs as they are now: three done (5 + 10
    # + 10 units, the first kept what it reported), one running with none
    assert [(r["seq"], r["type"], r["data"]["jobs"], r["data"]["done"], r["data"]["total"], r["data"]["progress"])
            for r in rows] == [(1, "batch.progress", 4, 3, 40, 25)]


async def test_a_run_numbers_pass_after_pass_until_nothing_is_parked(pool):
    lane = uuid.uuid4()
    # more than one pass takes (2,000 rows): what one fast run parks between two beats
    await pool.executemany("INSERT INTO settled_backlog (lanes, types, run_ids, done, failed, retrying, deferred) "
                           "VALUES ($1, '{t}', '{NULL}', '{2}', '{0}', '{0}', '{0}')", [([lane],)] * 5000)
    run_id = await run(pool)
    await beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={})
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    rows = await pool.fetch("SELECT seq, data FROM events WHERE room = $1 ORDER BY seq", f"lane:{lane}")
    assert [r["seq"] for r in rows] == [1, 2, 3]  # three passes, one event each
    assert sum(r["data"]["done"] for r in rows) == 10000 and sum(r["data"]["batches"] for r in rows) == 5000


async def test_a_hub_following_only_a_batch_numbers_its_progress(pool, dsn, tenants):
    a, _, _ = tenants
    batch = await pool.fetchval("INSERT INTO batches (lane) VALUES ($1) RETURNING id", a.lane)
    await jobs(pool, "t", 2, lane=a.lane, batch_id=batch, total=1)

    hub = EventHub(lambda: db_connect(dsn), pool_getter(pool), queue=10)
    try:
        async with hub.subscribe(f"batch:{batch}", 0) as sub:
            await _settle(pool, a.lane, 2, await run(pool))     # no heartbeat, no reader: only the hub
            [event] = await asyncio.wait_for(sub.wait(), WAIT)
            assert (event.seq, event.type, event.data["done"], event.data["jobs"]) == (1, "batch.progress", 2, 2)
    finally:
        await hub.close()


async def test_a_person_changing_a_batch_is_told_at_once(pool, tenants):
    a, _, _ = tenants
    batch = await pool.fetchval("INSERT INTO batches (lane) VALUES ($1) RETURNING id", a.lane)
    [job, _] = await jobs(pool, "t", 2, lane=a.lane, batch_id=batch, total=3)
    async with acting(pool, PERSON) as conn:  # a cancel through the CLI or the API
        await conn.execute("UPDATE jobs SET status = 'failed', last_error = 'cancelled', finished_at = now() "
                           "WHERE id = $1", job)
    # numbered in the person's own transaction, nothing parked
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    rows = await pool.fetch("SELECT seq, type, data FROM events WHERE room = $1", f"batch:{batch}")
    assert [(r["seq"], r["type"], r["data"]["jobs"], r["data"]["failed"]) for r in rows] == [(1, "batch.progress", 2, 1)]


async def test_a_handler_reports_progress_through_its_context_and_the_batch_is_told(pool, tenants):
    a, _, _ = tenants
    batch = await pool.fetchval("INSERT INTO batches (lane) VALUES ($1) RETURNING id", a.lane)
    [job_id] = await jobs(pool, "steps", 1, lane=a.lane, batch_id=batch)
    seen = []

    async def three_steps(job, ctx):
        for done in (1, 2):
            await ctx.progress(done, 3)
            seen.append(await pool.fetchrow("SELECT progress, total FROM jobs WHERE id = $1", job.id))

    async def batched(batch_jobs, ctx):
        await ctx.progress(7, 9, job=batch_jobs[0])  # a batch_handler names the job

    result = await Pipeline(pool, [Stage(type="steps", handler=three_steps)],
                            load_settings(pipeline_plugins="", run_scheduler=False)).run("manual")
    assert result.jobs_done == 1
    assert [(r["progress"], r["total"]) for r in seen] == [(1, 3), (2, 3)]
    # told live: the batch's progress, counted from its job, once the run numbers what it parked
    data = [r["data"] for r in await pool.fetch(
        "SELECT data FROM events WHERE room = $1 AND type = 'batch.progress' ORDER BY seq", f"batch:{batch}")]
    assert data and (data[-1]["progress"], data[-1]["total"], data[-1]["done"]) == (2, 3, 1)

    [other] = await jobs(pool, "lot", 1, lane=a.lane)
    await Pipeline(pool, [Stage(type="lot", batch_handler=batched)],
                   load_settings(pipeline_plugins="", run_scheduler=False)).run("manual")
    assert tuple(await pool.fetchrow("SELECT progress, total FROM jobs WHERE id = $1", other)) == (7, 9)
