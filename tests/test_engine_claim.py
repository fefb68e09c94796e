"""The claim: SKIP LOCKED exclusivity, readiness, leases and the fair order."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import datetime, timedelta, timezone
from collections import Counter

import pytest

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.jobs import NewJob
from tests import factories as f

# Lane priorities: a lane nobody ranked (the ownerless lane among them) has 0, between.
LOW, MIDDLE, HIGH = -10, 0, 10


async def test_claim_marks_running_counts_attempt_and_owner(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    run_id = await f.run(pool)
    [job] = await q.claim(pool, f.lease(), run_id, 10)
    row = await f.job_row(pool, job_id)
    assert job.id == job_id and job.attempts == 1 and job.run_id == run_id
    assert row["status"] == "running" and row["attempts"] == 1 and row["run_id"] == run_id
    assert row["locked_at"] is not None
    assert await q.claim(pool, f.lease(), run_id, 10) == []


async def test_claim_takes_only_its_type_and_due_jobs(pool):
    await f.jobs(pool, "other", 3)
    await f.jobs(pool, "t", 2)
    await q.enqueue(pool, NewJob(type="t", run_after=await pool.fetchval("SELECT now() + interval '1 hour'")))
    claimed = await q.claim(pool, f.lease(), await f.run(pool), 10)
    assert len(claimed) == 2 and {j.type for j in claimed} == {"t"}


async def test_concurrent_claims_never_share_a_job(pool):
    owner = await f.user(pool)
    lanes = [await f.lane(pool, owner, (LOW, MIDDLE, HIGH)[i % 3]) for i in range(6)]
    all_ids = set()
    for c in lanes:
        all_ids |= set(await f.jobs(pool, "t", 100, lane=c))
    all_ids |= set(await f.jobs(pool, "t", 100))  # ownerless lane
    runs = [await f.run(pool) for _ in range(8)]
    seen: list[uuid.UUID] = []

    async def claimer(run_id):
        async with pool.acquire() as conn:  # a connection of its own: real concurrency
            while True:
                got = await q.claim(conn, f.lease(), run_id, 7)
                if not got:
                    left = await conn.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending'")
                    if left == 0:
                        return
                    continue
                seen.extend(j.id for j in got)

    await asyncio.gather(*(claimer(r) for r in runs))
    dupes = [i for i, n in Counter(seen).items() if n > 1]
    assert dupes == []
    assert set(seen) == all_ids
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE attempts <> 1") == 0


async def test_stale_lease_is_reclaimed_only_while_attempts_remain(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    first = await f.run(pool)
    lease = f.lease(seconds=60, max_attempts=2)
    await q.claim(pool, lease, first, 1)
    second = await f.run(pool)
    assert await q.claim(pool, lease, second, 1) == []  # lease still fresh
    await f.age_lock(pool, job_id, 61)
    [again] = await q.claim(pool, lease, second, 1)
    assert again.id == job_id and again.attempts == 2 and again.run_id == second
    await f.age_lock(pool, job_id, 61)
    assert await q.claim(pool, lease, await f.run(pool), 1) == []  # died on its last attempt
    assert (await f.job_row(pool, job_id))["status"] == "running"  # left for the stuck sweep


async def test_lane_priority_then_least_served_lane_then_oldest(pool):
    owner = await f.user(pool)
    c_free = await f.lane(pool, owner, LOW)
    c_pro = await f.lane(pool, owner, HIGH)
    c_std = await f.lane(pool, owner, MIDDLE)
    await f.jobs(pool, "t", 2, lane=c_free)   # oldest of all
    await f.jobs(pool, "t", 2)                       # ownerless: the middle priority
    await f.jobs(pool, "t", 2, lane=c_std)
    await f.jobs(pool, "t", 2, lane=c_pro)    # newest of all
    run_id = await f.run(pool)
    order = []
    for _ in range(8):
        [job] = await q.claim(pool, f.lease(), run_id, 1)
        order.append(job.lane)
    assert order[:2] == [c_pro, c_pro]
    # the middle lane and ownerless work share the middle priority and alternate
    assert set(order[2:6]) == {c_std, ZERO} and order[2] != order[3]
    assert order[6:] == [c_free, c_free]


async def test_least_served_lane_goes_first_even_when_newer(pool):
    owner = await f.user(pool)
    busy, quiet = await f.lane(pool, owner, HIGH), await f.lane(pool, owner, HIGH)
    await f.jobs(pool, "t", 5, lane=busy)
    run_id = await f.run(pool)
    served = await q.claim(pool, f.lease(), run_id, 3)          # busy has been served 3 today
    await q.complete(pool, run_id, [j.id for j in served])
    await f.jobs(pool, "t", 2, lane=quiet)              # newer than busy's backlog
    got = await q.claim(pool, f.lease(), run_id, 2)
    assert [j.lane for j in got] == [quiet, quiet]


async def test_one_claim_interleaves_lanes_of_the_same_priority(pool):
    owner = await f.user(pool)
    a, b = await f.lane(pool, owner), await f.lane(pool, owner)
    await f.jobs(pool, "t", 10, lane=a)
    await f.jobs(pool, "t", 10, lane=b)
    got = await q.claim(pool, f.lease(), await f.run(pool), 6)
    assert Counter(j.lane for j in got) == {a: 3, b: 3}


async def test_in_flight_work_counts_as_served(pool):
    owner = await f.user(pool)
    a, b = await f.lane(pool, owner, LOW), await f.lane(pool, owner, LOW)
    await f.jobs(pool, "t", 3, lane=a)
    run_id = await f.run(pool)
    await q.claim(pool, f.lease(), run_id, 2)  # still running, not completed
    await f.jobs(pool, "t", 3, lane=b)
    got = await q.claim(pool, f.lease(), run_id, 2)
    assert [j.lane for j in got] == [b, b]


async def test_lane_counters_follow_every_transition(pool):
    owner = await f.user(pool)
    c = await f.lane(pool, owner)
    await f.jobs(pool, "t", 6, lane=c)
    await pool.execute("INSERT INTO jobs (type, payload) VALUES ('t', '{}')")  # a plain INSERT
    run_id = await f.run(pool)
    got = await q.claim(pool, f.lease(), run_id, 5)
    await q.complete(pool, run_id, [got[0].id])
    await q.fail(pool, run_id, got[1].id, "boom", 3)
    await q.defer(pool, run_id, {got[2].id: await pool.fetchval("SELECT now()")})
    await pool.execute("DELETE FROM jobs WHERE status = 'pending' AND id = (SELECT id FROM jobs "
                       "WHERE status = 'pending' ORDER BY created_at LIMIT 1)")
    counts = await f.lane_counts(pool, "t")
    assert {lane: p for lane, (p, _) in counts.items() if p} == await f.true_pending(pool, "t")
    # served: the attempts started in each lane, less the one the deferral handed back
    expected = Counter(j.lane or uuid.UUID(int=0) for j in got)
    expected[got[2].lane] -= 1
    assert {lane: s for lane, (_, s) in counts.items()} == dict(expected)
    assert sum(expected.values()) == 4


async def test_served_counts_older_than_a_day_expire(pool):
    """A lane's served counts live in its row for the current hour and in job_lane_hours for
    the hours that have passed; both are forgotten after a day."""
    owner = await f.user(pool)
    c = await f.lane(pool, owner)
    await f.jobs(pool, "t", 3, lane=c)
    run_id = await f.run(pool)
    await q.claim(pool, f.lease(), run_id, 2)
    await pool.execute("SELECT job_lanes_fold()")
    assert (await f.lane_counts(pool, "t"))[c][1] == 2
    # a day later, one more: the fold writes the old hour to job_lane_hours
    await pool.execute("UPDATE job_lanes SET hour_at = hour_at - interval '25 hours'")
    await q.claim(pool, f.lease(), run_id, 1)
    await pool.execute("SELECT job_lanes_fold()")
    assert await pool.fetchval("SELECT sum(served) FROM job_lane_hours") == 2
    assert (await f.lane_counts(pool, "t"))[c][1] == 3
    await q.expire_served(pool)
    assert (await f.lane_counts(pool, "t"))[c][1] == 1
    assert await pool.fetchval("SELECT count(*) FROM job_lane_hours") == 0
    # the lane idle for a day: the hour its row holds goes too
    await pool.execute("UPDATE job_lanes SET hour_at = hour_at - interval '25 hours'")
    await q.expire_served(pool)
    assert (await f.lane_counts(pool, "t"))[c][1] == 0
    assert await pool.fetchval("SELECT count(*) FROM job_lane_served_hours") == 0


async def test_a_claim_never_comes_back_empty_while_another_lane_has_ready_work(pool):
    owner = await f.user(pool)
    busy = await f.lane(pool, owner, HIGH)
    other = await f.lane(pool, owner, LOW)
    await f.jobs(pool, "t", 5, lane=busy)
    await f.jobs(pool, "t", 40, lane=other)
    async with pool.acquire() as holder:
        tr = holder.transaction()
        await tr.start()
        try:
            # another claim holds every ready job of the best lane, not yet committed
            held = await q.claim(holder, f.lease(), await f.run(pool), 5)
            assert {j.lane for j in held} == {busy}
            got = await q.claim(pool, f.lease(), await f.run(pool), 25)
            assert len(got) == 25 and {j.lane for j in got} == {other}
        finally:
            await tr.rollback()


# -- lanes: the claim reads jobs and lane rows only ---------------------------------------

ZERO = uuid.UUID(int=0)


async def insert_jobs(db, lane, n: int, minutes_old: float, run_after_minutes: float = 0) -> None:
    """n jobs of type t in the lane, a plain INSERT as any client would write it, created
    `minutes_old` ago (1 ms apart); due `run_after_minutes` from now (default: due now)."""
    await db.execute(
        "INSERT INTO jobs (type, lane, created_at, run_after) "
        "SELECT 't', $1, now() - make_interval(mins => $3) + g * interval '1 ms', "
        "       now() + make_interval(mins => $4) "
        "FROM generate_series(1, $2) g", lane, n, float(minutes_old), float(run_after_minutes))


async def test_tied_lanes_go_oldest_ready_job_first(pool):
    # Five lanes of one priority, none served yet, made in an order that is not their
    # work's age. Before lanes carried their oldest job, a claim of one took whichever
    # tied lane came first (the 10-minute one over the 3-hour one).
    owner = await f.user(pool)
    age_of = {}
    for minutes in (10, 180, 60, 30, 120):
        c = await f.lane(pool, owner)
        await insert_jobs(pool, c, 3, minutes)
        age_of[c] = minutes
    deferred = await f.lane(pool, owner)  # the oldest jobs of all, but not due for an hour
    await insert_jobs(pool, deferred, 3, 600, run_after_minutes=60)
    age_of[deferred] = "deferred"
    run_id = await f.run(pool)
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:  # a claim of three takes the three oldest lanes' heads
            three = await q.claim(conn, f.lease(), run_id, 3)
            assert sorted(age_of[j.lane] for j in three) == [60, 120, 180]
        finally:
            await tr.rollback()
    order = []
    for _ in range(6):
        got = await q.claim(pool, f.lease(), run_id, 1)
        order.extend(age_of[j.lane] for j in got)
    # each lane served once in turn, oldest work first; the deferred lane waits
    assert order == [180, 120, 60, 30, 10, 180]


async def pausing_stops_the_lane(pool, busy, other, pause: str, resume: str) -> None:
    """`busy` (claimed first) and `other` get three jobs each; `busy`'s first is left by a
    dead worker. While `pause` (SQL, $1 the lane) holds, only `other`'s are claimed, the
    stale one too; after `resume`, `busy`'s three."""
    await insert_jobs(pool, busy, 3, 60)
    await insert_jobs(pool, other, 3, 60)
    lease = f.lease(seconds=60)
    [held] = await q.claim(pool, lease, await f.run(pool), 1)
    assert held.lane == busy
    await f.age_lock(pool, held.id, 61)  # its worker died
    await f.as_system(pool, pause, busy)
    got = await q.claim(pool, lease, await f.run(pool), 10)
    assert {j.lane for j in got} == {other} and len(got) == 3
    await f.as_system(pool, resume, busy)
    got = await q.claim(pool, lease, await f.run(pool), 10)
    assert {j.lane for j in got} == {busy} and held.id in {j.id for j in got} and len(got) == 3


async def test_a_paused_lane_is_not_claimed_stale_leases_included_until_resumed(pool):
    owner = await f.user(pool)
    busy, other = await f.lane(pool, owner, HIGH), await f.lane(pool, owner, LOW)
    await pausing_stops_the_lane(pool, busy, other, "UPDATE lanes SET paused = true WHERE id = $1",
                                 "UPDATE lanes SET paused = false WHERE id = $1")


async def test_a_lanes_priority_changed_in_plain_sql_reorders_the_claim(pool):
    owner = await f.user(pool)
    a, b = await f.lane(pool, owner, LOW), await f.lane(pool, owner, MIDDLE)
    await insert_jobs(pool, a, 5, 60)
    await insert_jobs(pool, b, 5, 60)
    run_id = await f.run(pool)

    async def next_lane():
        [job] = await q.claim(pool, f.lease(), run_id, 1)
        return job.lane

    assert await next_lane() == b
    await f.as_system(pool, "UPDATE lanes SET priority = $2 WHERE id = $1", a, HIGH)
    assert await next_lane() == a
    await f.as_system(pool, "UPDATE lanes SET priority = $2 WHERE id = $1", a, LOW)
    assert await next_lane() == b


async def test_stale_reclaims_follow_the_lane_order(pool):
    owner = await f.user(pool)
    c_free, c_std, c_pro = [await f.lane(pool, owner, p) for p in (LOW, MIDDLE, HIGH)]
    await insert_jobs(pool, c_free, 1, 60)
    await insert_jobs(pool, c_pro, 1, 60)
    lease = f.lease(seconds=60)
    dead = await q.claim(pool, lease, await f.run(pool), 2)  # both held by a run that died
    for job in dead:
        await f.age_lock(pool, job.id, 3600 if job.lane == c_free else 120)
    await insert_jobs(pool, c_std, 1, 1)
    run_id = await f.run(pool)
    order = [(await q.claim(pool, lease, run_id, 1))[0] for _ in range(3)]
    # the high lane's stale job, the middle one's fresh one, then the low one's, whose lease
    # expired first
    assert [j.lane for j in order] == [c_pro, c_std, c_free]
    assert [j.attempts for j in order] == [2, 1, 2]


async def test_a_lanes_stale_jobs_weigh_before_its_ready_ones(pool):
    owner = await f.user(pool)
    a, b = [await f.lane(pool, owner) for _ in range(2)]
    lease = f.lease(seconds=60)
    dead = await f.jobs(pool, "t", 2, lane=a)  # an hour old, held by a run that died: a has served 2
    for job in await q.claim(pool, lease, await f.run(pool), 2):
        await f.age_lock(pool, job.id, 120)
    now = await pool.fetchval("SELECT now()")
    await f.jobs(pool, "t", 2, lane=a, start=now - timedelta(minutes=20))
    b_jobs = await f.jobs(pool, "t", 4, lane=b, start=now - timedelta(minutes=30))
    claimed = await q.claim(pool, lease, await f.run(pool), 5)
    # a's stale jobs weigh 2 + 1 and 2 + 2, its ready ones 2 + 2 + 1 and on; b's 1, 2, 3, 4.
    # The lightest five, ties to the older job: b's first three and a's two stale ones.
    assert {j.id for j in claimed} == set(dead) | set(b_jobs[:3])


async def test_a_stale_job_that_lost_its_slot_fills_what_a_deferred_job_left_empty(pool):
    """Lane a (never served) holds one job due and one deferred for an hour: its two slots
    outweigh lane b's stale job (b has served 3), but only one of them can be filled. A
    claim of 2 takes a's due job and b's stale one; it took a's alone."""
    owner = await f.user(pool)
    a, b = await f.lane(pool, owner), await f.lane(pool, owner)
    lease = f.lease(seconds=60)
    await f.jobs(pool, "t", 3, lane=b)
    served = await q.claim(pool, lease, await f.run(pool), 3)  # b has served 3; one died with its run
    await q.complete(pool, served[0].run_id, [served[0].id, served[1].id])
    await f.age_lock(pool, served[2].id, 120)
    due = await f.jobs(pool, "t", 1, lane=a)
    await q.enqueue(pool, NewJob(type="t", lane=a,
                                 run_after=await pool.fetchval("SELECT now() + interval '1 hour'")))
    claimed = await q.claim(pool, lease, await f.run(pool), 2)
    assert {j.id for j in claimed} == {due[0], served[2].id}


async def _two_claims_at_once_over_60_tied_lanes(pool, dsn, scan_turned_off: str) -> tuple[list, list]:
    """Two claims of 25 in open transactions, the first holding 25 lanes' only jobs while the
    second claims; the first planned with `scan_turned_off` ('enable_seqscan', ...) off, on
    a connection of its own that is closed afterwards: a backend keeps the plans it made
    under a setting (plpgsql's in the triggers too) after the setting is reset, and a pooled
    one would hand them to later tests."""
    owner = await f.user(pool)
    lanes = [await f.lane(pool, owner) for _ in range(60)]
    for c in lanes:
        await insert_jobs(pool, c, 1, 60)
    a = await connect(dsn)
    try:
        await a.execute(f"SET {scan_turned_off} = off")
        async with pool.acquire() as b:
            ta, tb = a.transaction(), b.transaction()
            await ta.start()
            await tb.start()
            try:
                first = await q.claim(a, f.lease(), await f.run(pool), 25)
                second = await q.claim(b, f.lease(), await f.run(pool), 25)
            finally:
                await ta.rollback()
                await tb.rollback()
    finally:
        await a.close()
    return first, second


async def test_two_claims_at_once_over_many_tied_lanes_share_nothing_and_neither_is_empty(pool, dsn):
    # the claim as planned on the lane index (the test below: planned otherwise)
    first, second = await _two_claims_at_once_over_60_tied_lanes(pool, dsn, "enable_seqscan")
    assert len(first) == 25 and len(second) == 25
    assert not {j.id for j in first} & {j.id for j in second}


async def test_two_claims_at_once_share_the_lanes_whatever_the_plan(pool, dsn):
    """The test above with the claim planned without the lane index. When the probes were
    sorted after they ran, the first claim locked all 60 lanes' heads and the second came
    back empty while 35 lanes had a ready job nobody held; now the probes follow the walk
    and stop at the claim's size, whatever the plan."""
    first, second = await _two_claims_at_once_over_60_tied_lanes(pool, dsn, "enable_indexscan")
    assert len(first) == 25 and len(second) == 25


async def test_a_lane_whose_work_is_all_deferred_does_not_hold_up_the_claim(pool):
    owner = await f.user(pool)
    waiting = [await f.lane(pool, owner, HIGH) for _ in range(30)]
    for c in waiting:
        await insert_jobs(pool, c, 2, 600, run_after_minutes=60)
    ready = await f.lane(pool, owner, LOW)
    await insert_jobs(pool, ready, 5, 1)
    got = await q.claim(pool, f.lease(), await f.run(pool), 5)
    assert len(got) == 5 and {j.lane for j in got} == {ready}
    # their jobs come due: the lanes are ready again, in order, with nothing else changed
    await pool.execute("UPDATE jobs SET run_after = now() - interval '1 second' WHERE lane = ANY ($1)",
                       waiting)
    got = await q.claim(pool, f.lease(), await f.run(pool), 30)
    assert {j.lane for j in got} == set(waiting)


async def lane_heads(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, pending, head_at, ready_at FROM job_lanes WHERE type = $1", type_)
    return {r["lane"]: (r["pending"], r["head_at"], r["ready_at"]) for r in rows}


async def true_heads(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, count(*)::int AS n, min(created_at) AS head, min(run_after) AS ready "
                          "FROM jobs WHERE type = $1 AND status = 'pending' GROUP BY lane", type_)
    return {r["lane"]: (r["n"], r["head"], r["ready"]) for r in rows}


async def test_a_lanes_head_and_readiness_follow_every_transition(pool):
    owner = await f.user(pool)
    a, b = await f.lane(pool, owner), await f.lane(pool, owner)
    await insert_jobs(pool, a, 6, 60)
    await insert_jobs(pool, b, 3, 30)
    # the ownerless lane: due times out of step with age (the oldest job came due last)
    await pool.execute("INSERT INTO jobs (type, created_at, run_after) "
                       "SELECT 't', now() - g * interval '1 hour', now() - interval '10 minutes' + g * interval '1 minute' "
                       "FROM generate_series(1, 4) g")
    run_id = await f.run(pool)
    checks = 0

    async def check():
        """head_at is the oldest pending job; ready_at says whether one is due: it is the
        earliest due time while that is in the future, else a due time already past."""
        nonlocal checks
        # before the fold: no later than the truth, so the claim's walk and probes find it
        kept, truth = await lane_heads(pool, "t"), await true_heads(pool, "t")
        now = await pool.fetchval("SELECT now()")
        for lane, (n, head, earliest) in truth.items():
            pending, head_at, ready_at = kept[lane]
            assert pending > 0 and head_at <= head and ready_at <= max(earliest, now)
        # folded: exact
        await pool.execute("SELECT job_lanes_fold()")
        kept = await lane_heads(pool, "t")
        assert {lane for lane, v in kept.items() if v[0]} == set(truth)
        for lane, (n, head, earliest) in truth.items():
            pending, head_at, ready_at = kept[lane]
            assert (pending, head_at) == (n, head)
            assert ready_at == earliest if earliest > now else earliest <= ready_at <= now
        assert all(v == (0, None, None) for v in kept.values() if not v[0])
        checks += 1

    await check()
    got = await q.claim(pool, f.lease(), run_id, 4)
    await check()
    await q.defer(pool, run_id, {got[0].id: await pool.fetchval("SELECT now() + interval '1 hour'")})
    await check()
    await q.fail(pool, run_id, got[1].id, "boom", 3)  # back with a backoff
    await check()
    await q.complete(pool, run_id, [got[2].id])
    await check()
    await pool.execute("UPDATE jobs SET run_after = now() + interval '1 day' "
                       "WHERE status = 'pending' AND lane = $1", b)  # all of b deferred
    await check()
    assert (await lane_heads(pool, "t"))[b][2] > await pool.fetchval("SELECT now()")
    await pool.execute("UPDATE jobs SET created_at = created_at - interval '1 day' WHERE id = "
                       "(SELECT id FROM jobs WHERE status = 'pending' AND lane = $1 "
                       " ORDER BY created_at DESC LIMIT 1)", a)
    await check()
    await pool.execute("DELETE FROM jobs WHERE status = 'pending' AND lane = '00000000-0000-0000-0000-000000000000'")
    await check()
    while await q.claim(pool, f.lease(), run_id, 3):
        await check()
    assert checks >= 10


async def test_a_batch_comes_back_oldest_first(pool):
    # The rows lie on disk newest first (each job's last write gives its created_at, in
    # reverse) and the ids are random, so neither order can pass for the claim's.
    ids = await f.jobs(pool, "t", 12)
    start = await pool.fetchval("SELECT now() - interval '1 hour'")
    for i, job_id in enumerate(ids):
        await pool.execute("UPDATE jobs SET created_at = $2::timestamptz + make_interval(secs => $3) WHERE id = $1",
                           job_id, start, float(len(ids) - i))
    claimed = await q.claim(pool, f.lease(), await f.run(pool), 12)
    assert [j.id for j in claimed] == list(reversed(ids))

    # Over lanes, the lanes choose the jobs (here all of them) and the batch is still
    # oldest first.
    owner = await f.user(pool)
    top, a, b = await f.lane(pool, owner, HIGH), await f.lane(pool, owner, LOW), await f.lane(pool, owner, LOW)
    b_jobs = await f.jobs(pool, "u", 2, lane=b)
    a_jobs = await f.jobs(pool, "u", 2, lane=a, start=await pool.fetchval("SELECT now() - interval '2 hours'"))
    top_jobs = await f.jobs(pool, "u", 2, lane=top)
    claimed = await q.claim(pool, f.lease("u"), await f.run(pool), 6)
    assert [j.id for j in claimed] == [*a_jobs, *b_jobs, *top_jobs]


async def test_a_claim_takes_exactly_the_lightest_slots_of_every_lane(pool):
    """Against a reference that weighs every ready job of every lane (the claim weighs only
    the slots that can still win): lanes of three priorities, uneven served counts and
    backlogs, more lanes than the claim takes; the jobs each lane gets must match."""
    rng = random.Random(7)
    for round_ in range(6):
        await pool.execute("DELETE FROM jobs")
        lanes = [uuid.uuid4() for _ in range(rng.randint(8, 40))]
        start = datetime.now(timezone.utc) - timedelta(hours=1)
        for lane in lanes:
            await f.jobs(pool, "t", rng.randint(1, 8), lane=lane,
                         start=start + timedelta(seconds=rng.randint(0, 600)))
        for lane in lanes:
            await pool.execute("UPDATE lanes SET priority = $2 WHERE id = $1", lane, rng.choice([0, 10, 20]))
            await pool.execute("UPDATE job_lanes SET served = $2 WHERE lane = $1", lane, rng.randint(0, 6))
        await pool.execute("SELECT job_lanes_fold()")  # the last round's jobs deleted: folded in
        rows = await pool.fetch(
            "SELECT l.lane, l.priority, l.served, l.head_at, l.pending FROM job_lanes l WHERE l.type = 't'")
        slots = sorted(((-r["priority"], r["served"] + k, r["head_at"], r["lane"])
                        for r in rows for k in range(1, r["pending"] + 1)), key=lambda s: s[:3])
        limit = rng.choice([3, 10, 25])
        expected = Counter(s[3] for s in slots[:limit])
        got = await q.claim(pool, f.lease(), await f.run(pool), limit)
        assert Counter(j.lane for j in got) == expected, (round_, limit)


# A job's own priority (migration 0058): inside its lane, higher first, then oldest.
RANKS = [0, 5, -3, 5, 0, 2, -3, 0]


async def _ranked_lane(pool, lane=None) -> list:
    """RANKS's jobs in one lane, oldest first, set in plain SQL; their ids in the order a
    lane must give them: priority, highest first, then oldest."""
    ids = await f.jobs(pool, "t", len(RANKS), lane=lane)
    for job_id, rank in zip(ids, RANKS):
        await pool.execute("UPDATE jobs SET priority = $2 WHERE id = $1", job_id, rank)
    return [ids[i] for i in sorted(range(len(RANKS)), key=lambda i: (-RANKS[i], i))]


@pytest.mark.parametrize("lease", [f.lease(), q.Lease("t", 900, 3, global_concurrency=100, limit_by="lane")],
                         ids=["claim", "keyed claim"])
async def test_inside_a_lane_higher_priority_first_then_oldest(pool, lease):
    want = await _ranked_lane(pool)
    run_id = await f.run(pool)
    one_by_one = [(await q.claim(pool, lease, run_id, 1))[0].id for _ in RANKS]
    assert one_by_one == want
    await pool.execute("UPDATE jobs SET status = 'pending', run_id = NULL, locked_at = NULL, attempts = 0")
    for n in (1, 3, 5):  # a claim of n takes the lane's first n, whatever the plan
        got = await q.claim(pool, lease, await f.run(pool), n)
        assert {j.id for j in got} == set(want[:n]), n
        await pool.execute("UPDATE jobs SET status = 'pending', run_id = NULL, locked_at = NULL, attempts = 0")


async def test_a_jobs_priority_leaves_the_order_between_lanes_as_it_was(pool):
    """Two lanes tied on priority and served: the one with the older work goes first, even
    when the other's first job is ranked high; the ranked job goes first inside its lane."""
    owner = await f.user(pool)
    older, newer = await f.lane(pool, owner), await f.lane(pool, owner)
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    [first_plain] = await f.jobs(pool, "t", 1, lane=older, start=start)
    [other] = await f.jobs(pool, "t", 1, lane=newer, start=start + timedelta(minutes=1))
    [ranked] = await f.jobs(pool, "t", 1, lane=older, start=start + timedelta(minutes=2))
    await pool.execute("UPDATE jobs SET priority = 9 WHERE id = $1", ranked)
    run_id = await f.run(pool)
    order = [(await q.claim(pool, f.lease(), run_id, 1))[0].id for _ in range(3)]
    # the older lane first (its oldest job is older), and inside it the ranked job; then the
    # other lane, served less
    assert order == [ranked, other, first_plain]


@pytest.mark.parametrize("runs", [1, 3])
async def test_ranked_jobs_of_many_lanes_go_in_lane_order_and_none_is_taken_twice(pool, dsn, runs):
    owner = await f.user(pool)
    lanes = [await f.lane(pool, owner) for _ in range(6)]
    wants = {lane: await _ranked_lane(pool, lane) for lane in lanes}

    async def drain() -> list:
        conn = await connect(dsn)
        try:
            run_id, batches = await f.run(conn), []
            while batch := await q.claim(conn, f.lease(), run_id, 4):
                batches.append([j.id for j in batch])
            return batches
        finally:
            await conn.close()
    drained = await asyncio.gather(*(drain() for _ in range(runs)))
    taken = [i for batches in drained for batch in batches for i in batch]
    assert sorted(taken) == sorted(i for w in wants.values() for i in w)
    if runs > 1:
        # a claim skips a job another claim's probe holds until that statement commits, and
        # may take the lane's next one first: across overlapping runs, each job once
        return
    # one run takes each lane's jobs in the lane's order: a job of a later claim never ranks
    # before one of an earlier claim
    nth = {i: k for k, batch in enumerate(drained[0]) for i in batch}
    for lane, want in wants.items():
        mine = [nth[i] for i in want]
        assert mine == sorted(mine), lane


async def test_a_job_set_back_to_priority_0_in_plain_sql_is_found_behind_the_lanes_head(pool):
    """The lane's head is its oldest job of priority 0; a ranked job older than it, set back
    to 0 by hand, goes first as the oldest (migration 0059), and is not left behind."""
    older, newer = await f.jobs(pool, "t", 2)
    await pool.execute("UPDATE jobs SET priority = 5 WHERE id = $1", older)
    run_id = await f.run(pool)
    await pool.execute("SELECT job_lanes_fold()")  # the head: the newer job, the oldest of priority 0
    await pool.execute("UPDATE jobs SET priority = 0 WHERE id = $1", older)
    order = [(await q.claim(pool, f.lease(), run_id, 1))[0].id for _ in range(2)]
    assert order == [older, newer]
    assert await q.claim(pool, f.lease(), run_id, 1) == []


async def test_a_claimed_job_carries_its_priority_for_the_jobs_it_enqueues(pool):
    [job_id] = await f.jobs(pool, "t", 1)
    await pool.execute("UPDATE jobs SET priority = 7 WHERE id = $1", job_id)
    for lease in (f.lease(), q.Lease("t", 900, 3, global_concurrency=5, limit_by="lane")):
        [job] = await q.claim(pool, lease, await f.run(pool), 5)
        assert (job.id, job.priority) == (job_id, 7)
        await pool.execute("UPDATE jobs SET status = 'pending', run_id = NULL, locked_at = NULL")
