"""The lane journal and its fold (docs/shared-database.md). Claims, endings and the
enqueues into a lane the claim already walks write a journal line and no lane row; once a
second (ten times a second while busy), a claim (or a run's heartbeat or end) folds the
lines into the rows of the next epoch. A claim never waits for a lane row another transaction holds, reads the lines as part
of the counts, and a fold leaves a lane it cannot take to the next one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from app.engine import jobs as q
from app.engine.accounts import authenticate
from app.engine.job_admin import waiting_in_own_lanes
from app.engine.queue_stats import queue_depth
from app.engine.runs import beat
from app.engine.tenancy import tenant_transaction
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from tests.api.serving_kit import make_settings
from tests.factories import api_key, jobs, lane, lane_counts, lease, run, true_pending

NOT_WAITING = 5.0  # seconds: far more than a claim takes, far less than the holder holds


LANE_ROW = "SELECT 1 FROM job_lanes WHERE lane = $1 FOR NO KEY UPDATE"


@asynccontextmanager
async def holding(dsn: str, sql: str, *args) -> AsyncIterator[None]:
    """Inside: another connection's open transaction holds what `sql` locks, as a claim in
    flight holds its lanes' rows until it commits; it commits on the way out."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("BEGIN")
        await conn.execute(sql, *args)
        yield
        await conn.execute("COMMIT")
    finally:
        await conn.close()


async def _served_by_hours(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, sum(served)::int AS n FROM job_lane_served_hours WHERE type = $1 "
                          "GROUP BY lane", type_)
    return {r["lane"]: r["n"] for r in rows}


async def test_a_claim_does_not_wait_for_a_lane_row_another_claim_holds(pool, dsn):
    held, free = uuid.uuid4(), uuid.uuid4()
    await jobs(pool, "t", 3, lane=held)
    await jobs(pool, "t", 3, lane=free)
    async with holding(dsn, LANE_ROW, held):
        run_id = await run(pool)
        got = await asyncio.wait_for(q.claim(pool, lease("t"), run_id, 4), NOT_WAITING)
        assert sorted(j.lane == held for j in got) == [False, False, True, True]
        # both lanes' counts wait in the journal; the rows are as the last fold left them
        assert await _rows(pool, "t") == {held: (3, 0), free: (3, 0)}
        assert await pool.fetchval("SELECT sum(pending)::int FROM job_lane_journal WHERE lane = $1", held) == -2
        assert await lane_counts(pool, "t") == {held: (1, 2), free: (1, 2)}
    # the run's heartbeat folds it in: the counters are the recount, served the hours'
    await beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={})
    assert await pool.fetchval("SELECT count(*) FROM job_lane_journal") == 0
    counts = await lane_counts(pool, "t")
    assert {lane: c[0] for lane, c in counts.items()} == await true_pending(pool, "t")
    assert {lane: c[1] for lane, c in counts.items()} == await _served_by_hours(pool, "t") == {held: 2, free: 2}


async def test_what_waits_is_counted_with_the_journal_before_it_is_folded(pool, dsn):
    """The queue's figures (/metrics, `skiplock status`) and a tenant's waiting-jobs cap read
    the counters: with a claim's counts still in the journal they must not say more waits
    than does."""
    key = await api_key(pool, "owner@example.com")
    actor = await authenticate(pool, key)
    owned = await lane(pool, actor.user_id)
    await jobs(pool, "t", 6, lane=owned)
    async with holding(dsn, LANE_ROW, owned):
        await asyncio.wait_for(q.claim(pool, lease("t"), await run(pool), 4), NOT_WAITING)
    assert await pool.fetchval("SELECT sum(pending) FROM job_lane_journal WHERE lane = $1", owned) < 0
    [depth] = [d for d in await queue_depth(pool) if d["type"] == "t"]
    assert (depth["pending"], depth["running"]) == (2, 4)
    async with tenant_transaction(pool, actor) as conn:
        assert await waiting_in_own_lanes(conn) == 2


async def test_the_claim_counts_what_the_journal_holds_as_served(pool, dsn):
    """Lane A was served twice by a claim that found its row held: the two are in the
    journal, not yet on A's row. Lane B, never served, gets work. A claim of two must weigh
    A as served twice and take both from B; read from A's row alone, A looked never served
    and got one of the two. (Overlapping claims piled into the lanes whose counts waited in
    the journal: the lanes of one priority drifted twice as far apart in a ten-run drain.)"""
    a, b = uuid.uuid4(), uuid.uuid4()
    await jobs(pool, "t", 3, lane=a)
    run_id = await run(pool)
    async with holding(dsn, LANE_ROW, a):
        await asyncio.wait_for(q.claim(pool, lease("t"), run_id, 2), NOT_WAITING)
    assert (await _rows(pool, "t"))[a] == (3, 0)               # not folded yet
    await jobs(pool, "t", 3, lane=b)
    got = await q.claim(pool, lease("t"), run_id, 2)
    assert [j.lane for j in got] == [b, b]


async def test_a_fold_writes_each_lane_once_into_the_next_epoch(pool):
    lane = uuid.uuid4()
    await jobs(pool, "t", 5, lane=lane)
    run_id = await run(pool)
    await pool.execute("SELECT job_lanes_fold()")
    await q.claim(pool, lease("t"), run_id, 2)  # within the second: the claims do not fold
    await q.claim(pool, lease("t"), run_id, 1)
    assert (await _rows(pool, "t"))[lane] == (5, 0)
    epoch = await pool.fetchval("SELECT job_lane_epoch()")
    await pool.execute("SELECT job_lanes_fold()")
    assert await pool.fetchval("SELECT count(*) FROM job_lane_journal") == 0
    assert await pool.fetchval("SELECT job_lane_epoch()") == epoch + 1
    assert await pool.fetchval("SELECT epoch FROM job_lanes WHERE lane = $1", lane) == epoch + 1
    assert (await _rows(pool, "t"))[lane] == (2, 3)
    # the lane's head moved past the three claimed jobs
    head = await pool.fetchval("SELECT head_at FROM job_lanes WHERE lane = $1", lane)
    assert head == await pool.fetchval(
        "SELECT min(created_at) FROM jobs WHERE lane = $1 AND status = 'pending'", lane)


async def test_a_hand_back_is_found_by_the_next_claim_before_any_fold(pool):
    lane = uuid.uuid4()
    await jobs(pool, "t", 5, lane=lane)
    run_id = await run(pool)
    taken = await q.claim(pool, lease("t"), run_id, 5)
    until = await pool.fetchval("SELECT now()")
    back = await q.finish_and_claim(pool, lease("t"), run_id, 0, hand_back={taken[0].id: until})
    assert back.handed_back == 1
    assert (await lane_counts(pool, "t"))[lane] == (1, 4)
    assert [j.id for j in await q.claim(pool, lease("t"), await run(pool), 5)] == [taken[0].id]


async def test_a_head_a_fold_moved_past_an_uncommitted_job_comes_back_with_its_line(pool, dsn):
    """A job made pending again by a transaction still open when a fold probes the lane's
    head is not seen by that probe, which moves the head past it; its journal line says where
    it was, and the next fold moves the head back to it."""
    lane = uuid.uuid4()
    await jobs(pool, "t", 3, lane=lane)
    run_id = await run(pool)
    first, *_ = await q.claim(pool, lease("t"), run_id, 1)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("BEGIN")
        await conn.execute("UPDATE jobs SET status = 'pending', run_id = NULL WHERE id = $1", first.id)
        await pool.execute("SELECT job_lanes_fold()")
        head = await pool.fetchval("SELECT head_at FROM job_lanes WHERE lane = $1", lane)
        assert head > first.created_at
        await conn.execute("COMMIT")
    finally:
        await conn.close()
    await pool.execute("SELECT job_lanes_fold()")
    assert await pool.fetchval("SELECT head_at FROM job_lanes WHERE lane = $1", lane) == first.created_at
    got = await q.claim(pool, lease("t"), run_id, 1)
    assert [j.id for j in got] == [first.id]


async def _rows(db, type_: str) -> dict:
    """The lane rows alone, as the last fold or write left them."""
    rows = await db.fetch("SELECT lane, pending, served FROM job_lanes WHERE type = $1", type_)
    return {r["lane"]: (r["pending"], r["served"]) for r in rows}


async def _noop(job, ctx) -> None:
    return None


async def test_overlapping_runs_leave_every_count_and_number_exact(pool, dsn):
    lanes = [uuid.uuid4() for _ in range(12)]
    per_lane = 40
    for lane in lanes:
        await jobs(pool, "t", per_lane, lane=lane)
    stage = Stage(type="t", handler=_noop, batch=5, lease=60, timeout=10)
    settings = make_settings(dsn)
    results = await asyncio.gather(*(Pipeline(pool, [stage], settings).run(trigger="test") for _ in range(8)))
    assert sum(r.jobs_done for r in results) == len(lanes) * per_lane
    # the last run's end folded what the others left: nothing waits, every count is exact
    assert await pool.fetchval("SELECT count(*) FROM job_lane_journal") == 0
    assert await pool.fetchval("SELECT count(*) FROM settled_backlog") == 0
    counts = await lane_counts(pool, "t")
    assert all(c == (0, per_lane) for c in counts.values()), counts
    assert await _served_by_hours(pool, "t") == {lane: per_lane for lane in lanes}
    for lane in lanes:
        rows = await pool.fetch("SELECT seq, data FROM events WHERE room = $1 ORDER BY seq", f"lane:{lane}")
        assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
        assert sum(r["data"]["done"] for r in rows) == per_lane


async def test_a_fold_leaves_the_lines_of_a_lane_it_cannot_take_for_the_next_one(pool, dsn):
    """The run's fold reads the journal from its newest mark on (migration 0048). A lane whose
    row is held when it folds keeps its lines; the fold's mark must stay below them, or no
    later fold would look at them again and the lane's counts would stay wrong."""
    a, b = uuid.uuid4(), uuid.uuid4()
    await jobs(pool, "t", 3, lane=a)
    await jobs(pool, "t", 3, lane=b)
    run_id = await run(pool)
    async with holding(dsn, LANE_ROW, a), holding(dsn, LANE_ROW, b):
        await asyncio.wait_for(q.claim(pool, lease("t"), run_id, 4), NOT_WAITING)
    assert await pool.fetchval("SELECT count(DISTINCT lane) FROM job_lane_journal") == 2
    # a transaction that began after the lines were written holds a's row: the fold's
    # snapshot sees every line as ended, so only the line it leaves keeps its mark back
    async with holding(dsn, LANE_ROW, a):
        await beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={})
        assert [r[0] for r in await pool.fetch("SELECT DISTINCT lane FROM job_lane_journal")] == [a]
    await beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={})
    assert await pool.fetchval("SELECT count(*) FROM job_lane_journal") == 0
    counts = await lane_counts(pool, "t")
    assert {lane: c[0] for lane, c in counts.items()} == await true_pending(pool, "t")
    assert {lane: c[1] for lane, c in counts.items()} == await _served_by_hours(pool, "t") == {a: 2, b: 2}


async def test_marks_restored_from_another_cluster_mark_nothing_here(pool, dsn):
    """A dump restored into another cluster carries marks in the old cluster's transaction
    ids, above any the new one has given out: lines written under them are read all the
    same, and the next fold sets marks of this cluster."""
    lane = uuid.uuid4()
    await jobs(pool, "t", 4, lane=lane)
    far = "90000000000000"
    await pool.execute("UPDATE job_lanes SET journal_from = $1::text::xid8 WHERE lane = $2", far, lane)
    await pool.execute("INSERT INTO job_lane_journal_marks (xid) VALUES ($1::text::xid8)", far)
    run_id = await run(pool)
    async with holding(dsn, LANE_ROW, lane):
        await asyncio.wait_for(q.claim(pool, lease("t"), run_id, 2), NOT_WAITING)
    assert tuple(await pool.fetchrow("SELECT pending, served FROM job_lane_counts WHERE lane = $1", lane)) == (2, 2)
    await beat(pool, run_id, done=0, failed=0, deferred=0, units=0, summary={})
    assert await pool.fetchval("SELECT count(*) FROM job_lane_journal") == 0
    assert (await lane_counts(pool, "t"))[lane] == (2, 2)
    assert await pool.fetchval("SELECT journal_from < $1::text::xid8 FROM job_lanes WHERE lane = $2", far, lane)
    assert await pool.fetchval("SELECT max(xid) < $1::text::xid8 FROM job_lane_journal_marks", far)


async def test_a_lane_whose_row_was_emptied_away_gets_a_new_one(pool):
    """The counters emptied by hand (TRUNCATE job_lanes, as a benchmark resets a database)
    leave the lanes' keys behind; the next job of a lane makes its row again, and is claimed."""
    lane = uuid.uuid4()
    await jobs(pool, "t", 1, lane=lane)
    await pool.execute("DELETE FROM jobs")
    await pool.execute("TRUNCATE job_lanes, job_lane_journal")
    [job_id] = await jobs(pool, "t", 1, lane=lane)
    assert [j.id for j in await q.claim(pool, lease("t"), await run(pool), 5)] == [job_id]


@pytest.mark.parametrize("lane_had_work", [False, True], ids=["idle lane", "lane draining"])
async def test_a_job_enqueued_while_a_fold_passes_is_claimable_once_committed(pool, dsn, lane_had_work):
    """An enqueue whose transaction is still committing when a fold moves the epoch on: the
    fold waits for it (up to 20 ms), so its lane is in the new epoch and the job is claimed
    at once, not after the next fold. The lane either had no row in the epoch (written at
    once, into the epoch the fold left) or a row with work the fold would count as gone (its
    last job claimed meanwhile). The commit must reach the server within the fold's wait: a
    try the machine was too busy to arrange is made again (without the wait, every try fails)."""
    run_id = await run(pool)

    async def one_try() -> bool:
        lane = uuid.uuid4()
        if lane_had_work:
            await jobs(pool, "t", 1, lane=lane)
            await pool.execute("SELECT job_lanes_fold()")
            assert len(await q.claim(pool, lease("t"), run_id, 1)) == 1  # the row still says 1 pending
        await pool.execute("SELECT job_lanes_fold()")
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("BEGIN")
            job = await conn.fetchval("INSERT INTO jobs (type, lane) VALUES ('t', $1) RETURNING id", lane)
            await jobs(pool, "t", 1, lane=uuid.uuid4())  # work elsewhere: the fold has lines to fold
            fold = asyncio.create_task(pool.execute("SELECT job_lanes_fold()"))
            await asyncio.sleep(0.005)  # the fold has begun; the enqueue commits as it goes on
            await conn.execute("COMMIT")
            await fold
        finally:
            await conn.close()
        got = await q.claim(pool, lease("t"), run_id, 2)
        await q.complete(pool, run_id, [j.id for j in got])
        return job in [j.id for j in got]

    for _ in range(3):
        if await one_try():
            return
    raise AssertionError("in three tries the job was not claimable until a later fold")


async def test_a_busy_queue_folds_after_a_tenth_of_a_second_a_quiet_one_after_a_second(pool):
    """An epoch ends after a second, or after 100 ms once 50 transactions have begun since it
    started: the claims of a busy queue weigh and walk past a tenth of a second's work."""
    run_id = await run(pool)

    async def claim_folds() -> bool:
        await jobs(pool, "t", 1)  # a line: a fold has something to fold
        before = await pool.fetchval("SELECT job_lane_epoch()")
        await q.claim(pool, lease("t"), run_id, 1)
        return await pool.fetchval("SELECT job_lane_epoch()") > before

    async def transactions_since_the_epoch_began() -> int:
        return await pool.fetchval(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::numeric - t.xid::text::numeric "
            "FROM job_xid_times t ORDER BY t.xid DESC LIMIT 1")

    await asyncio.sleep(1.1)
    assert await claim_folds(), "a second has passed"
    await asyncio.sleep(0.15)
    began = await transactions_since_the_epoch_began()
    # the cluster's other transactions (autovacuum's ANALYZE) count too: a fold here is
    # wrong only if fewer than 50 had begun
    assert not await claim_folds() or began >= 45, "a tenth of a second, and only a few transactions"
    for _ in range(50):
        await pool.execute("SELECT pg_current_xact_id()")
    assert await claim_folds(), "a tenth of a second and 50 transactions"
    assert not await claim_folds(), "the epoch has just begun"
