"""The claim: SKIP LOCKED exclusivity, readiness, leases and the fair order."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from app.engine import jobs as q
from app.engine.jobs import NewJob
from tests import factories as f


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


async def test_paused_campaign_is_not_claimed_until_resumed(pool):
    owner = await f.user(pool, "pro")
    paused = await f.campaign(pool, owner, status="paused")
    await f.jobs(pool, "t", 3, campaign_id=paused)
    run_id = await f.run(pool)
    assert await q.claim(pool, f.lease(), run_id, 10) == []
    await f.as_system(pool, "UPDATE campaigns SET status = 'active' WHERE id = $1", paused)
    assert len(await q.claim(pool, f.lease(), run_id, 10)) == 3


async def test_concurrent_claims_never_share_a_job(pool):
    owners = [await f.user(pool, plan) for plan in ("free", "standard", "pro")]
    campaigns = [await f.campaign(pool, owners[i % 3]) for i in range(6)]
    all_ids = set()
    for c in campaigns:
        all_ids |= set(await f.jobs(pool, "t", 100, campaign_id=c))
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


async def test_plan_priority_then_least_served_campaign_then_oldest(pool):
    free, standard, pro = [await f.user(pool, p) for p in ("free", "standard", "pro")]
    c_free = await f.campaign(pool, free)
    c_pro = await f.campaign(pool, pro)
    c_std = await f.campaign(pool, standard)
    await f.jobs(pool, "t", 2, campaign_id=c_free)   # oldest of all
    await f.jobs(pool, "t", 2)                       # ownerless: the middle plan
    await f.jobs(pool, "t", 2, campaign_id=c_std)
    await f.jobs(pool, "t", 2, campaign_id=c_pro)    # newest of all
    run_id = await f.run(pool)
    order = []
    for _ in range(8):
        [job] = await q.claim(pool, f.lease(), run_id, 1)
        order.append(job.campaign_id)
    assert order[:2] == [c_pro, c_pro]
    # standard-plan campaign and ownerless work share the middle priority and alternate
    assert set(order[2:6]) == {c_std, None} and order[2] != order[3]
    assert order[6:] == [c_free, c_free]


async def test_least_served_campaign_goes_first_even_when_newer(pool):
    owner = await f.user(pool, "pro")
    busy, quiet = await f.campaign(pool, owner), await f.campaign(pool, owner)
    await f.jobs(pool, "t", 5, campaign_id=busy)
    run_id = await f.run(pool)
    served = await q.claim(pool, f.lease(), run_id, 3)          # busy has been served 3 today
    await q.complete(pool, run_id, [j.id for j in served])
    await f.jobs(pool, "t", 2, campaign_id=quiet)              # newer than busy's backlog
    got = await q.claim(pool, f.lease(), run_id, 2)
    assert [j.campaign_id for j in got] == [quiet, quiet]


async def test_one_claim_interleaves_campaigns_of_the_same_plan(pool):
    owner = await f.user(pool, "standard")
    a, b = await f.campaign(pool, owner), await f.campaign(pool, owner)
    await f.jobs(pool, "t", 10, campaign_id=a)
    await f.jobs(pool, "t", 10, campaign_id=b)
    got = await q.claim(pool, f.lease(), await f.run(pool), 6)
    assert Counter(j.campaign_id for j in got) == {a: 3, b: 3}


async def test_in_flight_work_counts_as_served(pool):
    owner = await f.user(pool, "free")
    a, b = await f.campaign(pool, owner), await f.campaign(pool, owner)
    await f.jobs(pool, "t", 3, campaign_id=a)
    run_id = await f.run(pool)
    await q.claim(pool, f.lease(), run_id, 2)  # still running, not completed
    await f.jobs(pool, "t", 3, campaign_id=b)
    got = await q.claim(pool, f.lease(), run_id, 2)
    assert [j.campaign_id for j in got] == [b, b]


async def test_lane_counters_follow_every_transition(pool):
    owner = await f.user(pool)
    c = await f.campaign(pool, owner)
    await f.jobs(pool, "t", 6, campaign_id=c)
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
    expected = Counter(j.campaign_id or uuid.UUID(int=0) for j in got)
    expected[got[2].campaign_id or uuid.UUID(int=0)] -= 1
    assert {lane: s for lane, (_, s) in counts.items()} == dict(expected)
    assert sum(expected.values()) == 4


async def test_served_counts_older_than_a_day_expire(pool):
    owner = await f.user(pool)
    c = await f.campaign(pool, owner)
    await f.jobs(pool, "t", 2, campaign_id=c)
    await q.claim(pool, f.lease(), await f.run(pool), 2)
    assert (await f.lane_counts(pool, "t"))[c][1] == 2
    await pool.execute("UPDATE job_lane_hours SET hour = hour - interval '25 hours'")
    await q.expire_served(pool)
    assert (await f.lane_counts(pool, "t"))[c][1] == 0
    assert await pool.fetchval("SELECT count(*) FROM job_lane_hours") == 0


async def test_a_claim_never_comes_back_empty_while_another_lane_has_ready_work(pool):
    pro, free = await f.user(pool, "pro"), await f.user(pool, "free")
    busy = await f.campaign(pool, pro)
    other = await f.campaign(pool, free)
    await f.jobs(pool, "t", 5, campaign_id=busy)
    await f.jobs(pool, "t", 40, campaign_id=other)
    async with pool.acquire() as holder:
        tr = holder.transaction()
        await tr.start()
        try:
            # another claim holds every ready job of the best lane, not yet committed
            held = await q.claim(holder, f.lease(), await f.run(pool), 5)
            assert {j.campaign_id for j in held} == {busy}
            got = await q.claim(pool, f.lease(), await f.run(pool), 25)
            assert len(got) == 25 and {j.campaign_id for j in got} == {other}
        finally:
            await tr.rollback()
