"""The loop: stage order, budget, deferral vs failure, stop reasons and the runs row."""

from __future__ import annotations

import asyncio

import pytest

from app import DeferJob, Stage, StopRun
from app.engine import jobs as q
from app.engine.db import create_pool
from app.engine.jobs import NewJob
from app.pipeline import loop
from app.pipeline.loop import EMPTY_STAGE_RECHECK_SECONDS, STAGE_TURN_SECONDS, Pipeline
from app.pipeline.maintenance import RECURRING
from app.pipeline.run_slots import PoolTooSmall
from app.runtime import Runtime, run_limits
from app.settings import load_settings
from tests import factories as f

SETTINGS = load_settings(database_url="postgresql://unused")


def pipeline(pool, stages, **settings):
    return Pipeline(pool, stages, load_settings(database_url="postgresql://unused", **settings))


async def run_row(pool, run_id):
    return await pool.fetchrow("SELECT * FROM runs WHERE id = $1", run_id)


async def test_no_work_run_writes_its_row(pool):
    async def never(job, ctx):
        raise AssertionError("nothing to run")

    result = await pipeline(pool, [Stage(type="t", handler=never)]).run("manual")
    row = await run_row(pool, result.run_id)
    assert row["stop_reason"] == "no_work" and row["trigger"] == "manual"
    assert row["finished_at"] is not None and row["jobs_done"] == 0


async def test_loop_restarts_from_the_first_stage_after_every_batch(pool, monkeypatch):
    """With no quiet time for a stage found empty, the order is exact: after every batch the
    loop starts again from the first stage (with it, see the two tests below)."""
    monkeypatch.setattr(loop, "EMPTY_STAGE_RECHECK_SECONDS", 0.0)
    order = []

    async def extract(job, ctx):
        order.append("extract")

    async def crawl(job, ctx):
        order.append("crawl")
        await q.enqueue(ctx.db, NewJob(type="extract", payload={"from": job.payload["i"]}))

    stages = [Stage(type="extract", handler=extract, batch=5), Stage(type="crawl", handler=crawl, batch=1)]
    await f.jobs(pool, "crawl", 3)
    result = await pipeline(pool, stages).run("manual")
    # each crawl makes an extract, which runs before the next crawl: earlier stages win
    assert order == ["crawl", "extract"] * 3
    assert result.stop_reason == "no_work" and result.jobs_done == 6
    stages_summary = result.summary["stages"]
    assert stages_summary["crawl"] == stages_summary["extract"] == {"done": 3, "failed": 0, "retried": 0, "deferred": 0}
    # the pipeline's own housekeeping ran first and is not counted as the user's work
    assert stages_summary["maintenance"]["done"] == len(RECURRING)


async def test_empty_stages_ahead_cost_no_claim_per_batch(pool, monkeypatch):
    """Eight user stages, the work in the last: a stage found empty is looked at again after
    EMPTY_STAGE_RECHECK_SECONDS, not before every batch of the stages after it."""
    claims: list[str] = []
    settle = Pipeline._settle

    async def counted(self, conn, written, ctx, *, claim=None):
        if claim is not None:
            claims.append(claim.type)
        return await settle(self, conn, written, ctx, claim=claim)

    monkeypatch.setattr(Pipeline, "_settle", counted)

    async def noop(job, ctx):
        pass

    stages = [Stage(type=f"s{i}", handler=noop, batch=10, concurrency=10) for i in range(1, 9)]
    await f.jobs(pool, "s8", 600)
    started = asyncio.get_running_loop().time()
    result = await pipeline(pool, stages, pipeline_claim_streams=1).run("manual")
    seconds = asyncio.get_running_loop().time() - started
    assert result.jobs_done == 600
    batches = claims.count("s8")
    empty_looks = len(claims) - batches
    # the first pass, a look a second at each stage ahead, and the last pass before no_work
    assert empty_looks <= 7 * (2 + seconds / EMPTY_STAGE_RECHECK_SECONDS) + 9, (empty_looks, batches, seconds)
    assert batches <= 64  # 60 full batches, the empty claims that end the stage (a prefetch, the last pass)


async def test_work_due_in_an_empty_stage_ahead_is_claimed_within_a_second(pool):
    """Earlier stages still win: a job that becomes due in a stage found empty is claimed
    within EMPTY_STAGE_RECHECK_SECONDS while a later stage drains a backlog."""
    seen: dict[str, float] = {}
    clock = asyncio.get_running_loop().time

    async def early(job, ctx):
        seen["early"] = clock()

    async def late(job, ctx):
        await asyncio.sleep(0.01)

    stages = [Stage(type="early", handler=early, batch=1), Stage(type="late", handler=late, batch=1)]
    await f.jobs(pool, "late", 400)   # about 4 s of work, one at a time

    async def enqueue_later():
        await asyncio.sleep(1.0)
        seen["enqueued"] = clock()
        await q.enqueue(pool, NewJob(type="early"))

    later = asyncio.create_task(enqueue_later())
    await pipeline(pool, stages, pipeline_claim_streams=1).run("manual", budget=3)
    await later
    assert "early" in seen, "the early job never ran"
    assert seen["early"] - seen["enqueued"] <= EMPTY_STAGE_RECHECK_SECONDS + 0.5


async def test_a_flood_of_an_early_stage_does_not_starve_the_later_ones(pool):
    """Earlier stages win, but a later stage passed over for STAGE_TURN_SECONDS gets the
    next claim (a tenant's thousand early jobs held every tenant's later work back)."""
    ran: list[tuple[str, float]] = []
    start = 0.0

    async def early(job, ctx):
        ran.append(("early", asyncio.get_running_loop().time() - start))
        await asyncio.sleep(0.05)

    async def late(job, ctx):
        ran.append(("late", asyncio.get_running_loop().time() - start))

    stages = [Stage(type="early", handler=early, batch=1), Stage(type="late", handler=late, batch=1)]
    await f.jobs(pool, "early", 400)   # 20 s of work, one at a time
    await f.jobs(pool, "late", 2)
    start = asyncio.get_running_loop().time()
    result = await pipeline(pool, stages).run("manual", budget=5)
    assert result.stop_reason == "time_budget"
    lates = [at for kind, at in ran if kind == "late"]
    assert len(lates) == 2, ran[-5:]               # both had their turn inside the 5 s
    assert lates[0] < STAGE_TURN_SECONDS + 1.5     # the first within a turn, give or take a batch
    earlies = sum(1 for kind, _ in ran if kind == "early")
    assert earlies > 20 * len(lates)               # and the early stage still won nearly every batch


async def test_handler_counts_land_in_the_summary(pool):
    async def fetch(job, ctx):
        ctx.count("pages_fetched")
        ctx.count("contacts_found", 2)
        ctx.add_units(3)

    await f.jobs(pool, "t", 4)
    result = await pipeline(pool, [Stage(type="t", handler=fetch, batch=2, concurrency=2)]).run("cron")
    row = await run_row(pool, result.run_id)
    assert row["summary"]["counts"]["pages_fetched"] == 4 and row["summary"]["counts"]["contacts_found"] == 8
    assert row["quota_units"] == 12 and result.units == 12


async def test_budget_stops_claiming_and_defers_unstarted_work(pool):
    started = []

    async def slow(job, ctx):
        started.append(job.id)
        await asyncio.sleep(0.2)

    ids = await f.jobs(pool, "t", 20)
    # a second of budget: room for two 0.2 s handlers however slowly a loaded box starts
    # the run, far from the twenty it would take to finish
    result = await pipeline(pool, [Stage(type="t", handler=slow, batch=5, concurrency=1)]).run(
        "manual", budget=1.0)
    assert result.stop_reason == "time_budget"
    assert 2 <= len(started) < 20
    rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM jobs")}
    assert {rows[i]["status"] for i in started} == {"done"}
    others = [rows[i] for i in ids if i not in started]
    # claimed but never started: back to pending with the attempt handed back
    assert {r["status"] for r in others} == {"pending"} and {r["attempts"] for r in others} == {0}
    assert result.jobs_deferred == sum(1 for r in others if r["run_id"] == result.run_id)
    assert result.jobs_deferred >= 1


async def test_budget_request_is_capped_by_the_setting(dsn, pool):
    async def slow(job, ctx):
        await asyncio.sleep(0.1)

    await f.jobs(pool, "t", 50)
    runtime = Runtime(load_settings(database_url=dsn, pipeline_budget_seconds=0.3),
                      [Stage(type="t", handler=slow, batch=1)])
    try:
        result = await runtime.run("manual", requested=100)
    finally:
        await runtime.close()
    assert result.stop_reason == "time_budget" and result.budget_seconds == 0.3
    assert result.jobs_done <= 5


@pytest.mark.parametrize("requested, remaining, budget, hard_limit", [
    (None, None, 220, 290),      # the setting; cut at PLATFORM_LIMIT - FINISH_MARGIN
    (1000, None, 220, 290),      # a request is capped by the setting
    (30, None, 30, 290),
    (None, 100, 40, 90),         # Lambda: time left - LAMBDA_SAFETY_MARGIN; cut at left - FINISH_MARGIN
    (20, 100, 20, 90),
    (None, 30, 0, 20),           # too little time left: claim nothing, still record the run
    (None, 5, 0, 0),
])
def test_run_limits_are_decided_once(requested, remaining, budget, hard_limit):
    limits = run_limits(SETTINGS, requested, remaining)
    assert (limits.budget, limits.hard_limit) == (budget, hard_limit)


async def test_deferral_is_not_a_failure(pool):
    async def wait_for_quota(job, ctx):
        raise DeferJob(3600)

    [job_id] = await f.jobs(pool, "t", 1)
    result = await pipeline(pool, [Stage(type="t", handler=wait_for_quota, max_attempts=1)]).run("cron")
    row = await f.job_row(pool, job_id)
    assert result.jobs_deferred == 1 and result.jobs_failed == 0
    assert row["status"] == "pending" and row["attempts"] == 0
    wait = await pool.fetchval("SELECT extract(epoch FROM run_after - now()) FROM jobs WHERE id = $1", job_id)
    assert 3590 < wait <= 3600


async def test_failure_is_retried_with_backoff_then_given_up_with_a_refund(pool):
    refunds = []

    async def broken(job, ctx):
        raise ValueError("upstream said no")

    async def refund(job, ctx):
        refunds.append(job.id)

    stages = [Stage(type="t", handler=broken, max_attempts=2, gave_up=refund)]
    [job_id] = await f.jobs(pool, "t", 1)
    first = await pipeline(pool, stages).run("cron")
    row = await f.job_row(pool, job_id)
    assert (first.jobs_failed, first.jobs_retried) == (0, 1) and row["status"] == "pending" and row["attempts"] == 1
    assert row["last_error"] == "ValueError: upstream said no" and refunds == []
    await pool.execute("UPDATE jobs SET run_after = now()")  # two minutes later
    second = await pipeline(pool, stages).run("cron")
    row = await f.job_row(pool, job_id)
    assert (second.jobs_failed, second.jobs_retried) == (1, 0)
    assert row["status"] == "failed" and refunds == [job_id]


async def test_stage_timeout_is_a_failure_but_the_platform_limit_is_a_deferral(pool):
    async def hangs(job, ctx):
        await asyncio.sleep(30)

    [job_id] = await f.jobs(pool, "t", 1)
    stages = [Stage(type="t", handler=hangs, timeout=0.2)]
    result = await pipeline(pool, stages).run("manual")
    row = await f.job_row(pool, job_id)
    assert result.jobs_retried == 1 and row["last_error"] == "timed out after 0.2s"

    await pool.execute("UPDATE jobs SET run_after = now()")
    stages = [Stage(type="t", handler=hangs, timeout=20)]
    result = await pipeline(pool, stages).run("manual", hard_limit=0.3)
    row = await f.job_row(pool, job_id)
    assert result.jobs_deferred == 1 and result.jobs_failed == 0
    assert row["status"] == "pending" and row["attempts"] == 1  # only the earlier failure counts


async def test_batch_handler_reports_per_job_outcomes(pool):
    async def extract(jobs, ctx):
        return {jobs[0].id: RuntimeError("bad page"), jobs[1].id: DeferJob(60)}

    ids = await f.jobs(pool, "t", 4)
    result = await pipeline(pool, [Stage(type="t", batch_handler=extract, batch=10)]).run("manual")
    statuses = {r["id"]: (r["status"], r["attempts"]) for r in await pool.fetch("SELECT * FROM jobs")}
    assert statuses[ids[0]] == ("pending", 1) and statuses[ids[1]] == ("pending", 0)
    assert statuses[ids[2]] == statuses[ids[3]] == ("done", 1)
    assert (result.jobs_done, result.jobs_failed, result.jobs_retried, result.jobs_deferred) == (2, 0, 1, 1)


async def test_quota_stop_ends_the_run_with_its_reason(pool):
    seen = []

    async def spend(job, ctx):
        seen.append(job.id)
        if len(seen) == 2:
            raise StopRun("quota_exhausted", until=3600)

    ids = await f.jobs(pool, "t", 6)
    result = await pipeline(pool, [Stage(type="t", handler=spend, batch=3)]).run("cron")
    row = await run_row(pool, result.run_id)
    assert row["stop_reason"] == "quota_exhausted" and row["error"] is None
    assert len(seen) == 2 and result.jobs_done == 1
    statuses = {r["id"]: (r["status"], r["attempts"]) for r in await pool.fetch("SELECT * FROM jobs")}
    assert statuses[ids[1]] == ("pending", 0)  # the job that hit the wall is deferred
    assert statuses[ids[2]] == ("pending", 0)  # so is the rest of its batch
    assert [statuses[i][0] for i in ids[3:]] == ["pending"] * 3


async def test_reserve_stop_reason(pool):
    async def spend(job, ctx):
        raise StopRun("quota_reserve")

    await f.jobs(pool, "t", 1)
    result = await pipeline(pool, [Stage(type="t", handler=spend)]).run("cron")
    assert result.stop_reason == "quota_reserve"


async def test_an_engine_error_still_writes_the_runs_row(pool):
    async def sabotage(job, ctx):
        # a real database failure on the way out: completing any job now violates a constraint
        await ctx.db.execute("ALTER TABLE jobs ADD CONSTRAINT no_done CHECK (status <> 'done') NOT VALID")

    await f.jobs(pool, "t", 1)
    try:
        result = await pipeline(pool, [Stage(type="t", handler=sabotage)]).run("cron")
    finally:
        await pool.execute("ALTER TABLE jobs DROP CONSTRAINT IF EXISTS no_done")
    row = await run_row(pool, result.run_id)
    assert row["stop_reason"] == "error" and "no_done" in row["error"]
    assert row["finished_at"] is not None


async def test_a_killed_run_is_closed_as_an_error_by_the_next_run(pool):
    """Closed once its heartbeat is a minute old, with the counts of its last beat; a run
    that beat a moment ago is alive, however long ago it started."""
    abandoned, alive = await f.run(pool, "cron"), await f.run(pool, "cron")
    await pool.execute("UPDATE runs SET heartbeat_at = now() - interval '61 seconds', jobs_done = 7 "
                       "WHERE id = $1", abandoned)
    await pool.execute("UPDATE runs SET started_at = now() - interval '1 hour' WHERE id = $1", alive)
    await pipeline(pool, []).run("cron")
    row = await run_row(pool, abandoned)
    assert row["stop_reason"] == "error" and row["error"].startswith("abandoned: no heartbeat since")
    assert row["jobs_done"] == 7 and row["finished_at"] is not None
    assert (await run_row(pool, alive))["finished_at"] is None


async def test_stuck_jobs_are_swept_at_the_start_of_a_run(pool):
    refunds = []

    async def refund(job, ctx):
        refunds.append(job.id)

    async def nothing(job, ctx):
        pass

    stage = Stage(type="t", handler=nothing, lease=60, timeout=10, max_attempts=1, gave_up=refund)
    [job_id] = await f.jobs(pool, "t", 1)
    await q.claim(pool, stage.lease_terms, await f.run(pool), 1)
    await f.age_lock(pool, job_id, 61)
    result = await pipeline(pool, [stage]).run("cron")
    assert refunds == [job_id] and result.summary["counts"]["swept"] == 1 and result.jobs_failed == 1
    assert (await f.job_row(pool, job_id))["status"] == "failed"


async def test_overlapping_runs_share_the_work_without_doubling_it(pool):
    done = []

    async def work(job, ctx):
        done.append(job.id)
        await asyncio.sleep(0.02)  # one run alone would take over a second: each of three starts in time

    ids = await f.jobs(pool, "t", 300)
    stages = [Stage(type="t", handler=work, batch=10, concurrency=5)]
    results = await asyncio.gather(*(pipeline(pool, stages).run("cron") for _ in range(3)))
    assert sorted(done) == sorted(ids)
    assert sum(r.jobs_done for r in results) == 300
    assert all(r.jobs_done > 0 for r in results)


async def test_more_overlapping_runs_than_one_pool_can_hold_all_finish(dsn, pool):
    """Runs in one process share its pool, and a run holds one connection for its loop
    while its heartbeat, maintenance and runs row borrow another. Eight runs started at
    once on a pool of four held all four and waited for a fifth, for ever; now at most
    half the pool's size run at once, and the others wait their turn."""
    done = []

    async def work(job, ctx):
        done.append(job.id)
        await asyncio.sleep(0.005)

    ids = await f.jobs(pool, "t", 200)
    small = await create_pool(dsn, size=4)
    try:
        stages = [Stage(type="t", handler=work, batch=5, concurrency=2)]
        results = await asyncio.wait_for(
            asyncio.gather(*(pipeline(small, stages).run("cron") for _ in range(8))), timeout=60)
    finally:
        await small.close()
    assert sorted(done) == sorted(ids)
    assert sum(r.jobs_done for r in results) == 200 and all(r.stop_reason == "no_work" for r in results)
    assert await pool.fetchval("SELECT count(*) FROM runs WHERE finished_at IS NULL") == 0


async def test_a_pool_of_one_connection_is_refused_at_once(dsn):
    """With one connection a run held it for its loop and waited for ever for a second."""
    async def never(job, ctx):
        raise AssertionError("nothing runs")

    one = await create_pool(dsn, size=1)
    try:
        with pytest.raises(PoolTooSmall, match="DB_POOL_SIZE must be at least 2"):
            await asyncio.wait_for(pipeline(one, [Stage(type="t", handler=never)]).run("cron"), timeout=10)
    finally:
        await one.close()
