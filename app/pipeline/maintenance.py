"""Housekeeping at the start of every run: close killed runs, age the fairness
counters, and fail jobs stuck on their last attempt (calling gave_up once each)."""

from __future__ import annotations

import logging

from app.engine import jobs as q
from app.engine.runs import close_abandoned_runs
from app.pipeline.stage import Context, Stage

log = logging.getLogger("skiplock.maintenance")


async def sweep_stuck(pool, stages: list[Stage], ctx: Context) -> int:
    """Fail each job whose holder died on its last attempt, and hand it to gave_up.

    One transaction per job: the failure and the hook (a refund) commit together or
    not at all. A hook that raises leaves the job stuck, so the next sweep tries again."""
    swept = 0
    for stage in stages:
        for job_id in await q.stuck_candidates(pool, stage.lease_terms):
            try:
                async with pool.acquire() as conn, conn.transaction():
                    job = await q.fail_stuck(conn, stage.lease_terms, job_id)
                    if job is None:
                        continue  # another sweep got it first
                    if stage.gave_up is not None:
                        await stage.gave_up(job, ctx.with_db(conn))
                swept += 1
                ctx.tally.gave_up += 1
            except Exception as exc:  # the hook failed: the job stays stuck, retried next sweep
                ctx.tally.errors.append(f"gave_up({stage.type} {job_id}): {type(exc).__name__}: {exc}")
                log.warning("gave_up hook failed for %s job %s: %s", stage.type, job_id, exc)
    return swept


async def start_of_run(pool, stages: list[Stage], ctx: Context, platform_limit: float) -> None:
    # A run row still open after twice the platform limit was killed mid-way.
    await close_abandoned_runs(pool, platform_limit * 2)
    await q.expire_served(pool)
    swept = await sweep_stuck(pool, stages, ctx)
    if swept:
        ctx.count("swept", swept)
